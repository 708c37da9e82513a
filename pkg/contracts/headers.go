package contracts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/jsonvalue"
)

// HeaderValue returns the first value of header key in h, whatever the case
// of its name. nats.Header is a plain map and its Get is case-sensitive,
// but clients differ: some send "graphorin-run-id", as HTTP/2 and many
// libraries lower-case header names. A call that lost its run id that way
// would silently get a fresh one, and with it lose retry dedupe and its
// run's taint ledger. So every header graphorin reads from a client is
// read through this.
func HeaderValue(h nats.Header, key string) string {
	if h == nil {
		return ""
	}
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// CanonicalJSON re-encodes a JSON document in one canonical form: object
// keys sorted, no insignificant white space, no HTML escaping, numbers as
// written. Two documents that differ only in key order or spacing have the
// same canonical form, so a hash of it identifies arguments rather than
// the bytes a client happened to send. Anything but white space after
// the document is an error (InputHash then hashes the bytes as they are).
func CanonicalJSON(doc []byte) ([]byte, error) {
	v, err := jsonvalue.Decode(doc) // numbers as written (json.Number)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// InputHash is the SHA-256 (hex) of a call's input in canonical form
// (CanonicalJSON). It identifies a call's arguments: the same arguments
// with their keys in another order hash alike.
func InputHash(input json.RawMessage) string {
	b := []byte(input)
	if !isCanonical(b) {
		var err error
		if b, err = CanonicalJSON(input); err != nil {
			b = input
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
