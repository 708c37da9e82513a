package webguard

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
)

// KeyEnv is the environment variable a session key may come from.
const KeyEnv = "GRAPHORIN_SESSION_KEY"

// MinKeyBytes is the shortest session key accepted.
const MinKeyBytes = 32

// LoadKey returns the key sessions are signed with: the contents of file
// when one is named, else $GRAPHORIN_SESSION_KEY, else a key made now
// (generated is true). Instances behind one address share a key (a file
// or the variable); a generated key ends every session when the process
// stops, which for one process on a laptop is what one wants.
func LoadKey(file string) (key []byte, generated bool, err error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, false, fmt.Errorf("webguard: session key: %w", err)
		}
		key = bytes.TrimSpace(b)
	case os.Getenv(KeyEnv) != "":
		key = []byte(os.Getenv(KeyEnv))
	default:
		key = make([]byte, MinKeyBytes)
		_, _ = rand.Read(key)
		return key, true, nil
	}
	if len(key) < MinKeyBytes {
		return nil, false, fmt.Errorf("webguard: a session key needs at least %d bytes, got %d (make one with: head -c 32 /dev/urandom | base64)", MinKeyBytes, len(key))
	}
	return key, false, nil
}
