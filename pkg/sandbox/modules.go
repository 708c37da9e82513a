package sandbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Modules live in the modules bucket under their SHA-256 digest, so an
// object of that name already holds those bytes.
//
// # Why a module is not stored twice
//
// An object store Put of a name that exists writes the new chunks and
// then purges the old ones. A worker reading the object at that moment
// has subscribed to the old chunks, which are gone: its read gets nothing
// more and waits until its context ends. Publishing the same module again
// (a second `tools publish` of an unchanged tool, a deploy script run
// twice) did exactly that to every worker loading it: the published tools
// stayed unhosted for the loader's whole minute. The bytes are the same,
// so the store is left as it is.

// putModule stores module under its digest name, unless the bucket
// already holds it.
func putModule(ctx context.Context, obs jetstream.ObjectStore, name string, module []byte) error {
	h := sha256.New()
	h.Write(module)
	info, err := obs.GetInfo(ctx, name)
	switch {
	case err == nil && !info.Deleted && info.Size == uint64(len(module)) && info.Digest == jetstream.GetObjectDigestValue(h):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return err
	}
	_, err = obs.PutBytes(ctx, name, module)
	return err
}

// moduleTry bounds one read of a module; moduleTries is how many a load
// makes. A read that finds its object replaced under it (another
// publisher stored it at the same moment) gets nothing more and would
// wait out its whole context: a try of its own, and a fresh look at the
// object's chunks on the next, let the load go on. 256 MiB, the largest
// module, reads in seconds from a local server.
const (
	moduleTry   = 20 * time.Second
	moduleTries = 3
)

// getModule reads a module, in bounded tries.
func getModule(ctx context.Context, obs jetstream.ObjectStore, name string) ([]byte, error) {
	var err error
	for range moduleTries {
		tctx, cancel := context.WithTimeout(ctx, moduleTry)
		var code []byte
		code, err = obs.GetBytes(tctx, name)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrObjectNotFound) || ctx.Err() != nil {
			return code, err
		}
	}
	return nil, fmt.Errorf("%d tries: %w", moduleTries, err)
}
