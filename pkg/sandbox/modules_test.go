package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/natstest"
)

// TestModuleStoredOnce: a module published again is left as it is (the
// same object, the same chunks), so that a worker reading it at that
// moment does not find its chunks purged under it and wait out its
// loader's minute (TestPublishThenCallAtOnce took 66 seconds so); a
// different module under the name (which only a corrupted store holds) is
// replaced, and both read back whole.
func TestModuleStoredOnce(t *testing.T) {
	srv := natstest.RunServer(t)
	js, err := jetstream.New(srv.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs, err := js.CreateOrUpdateObjectStore(ctx, contracts.ModulesBucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	module := bytes.Repeat([]byte("\x00asm module bytes "), 64<<10) // a megabyte: several chunks
	sum := sha256.Sum256(module)
	name := hex.EncodeToString(sum[:])
	if err := putModule(ctx, obs, name, module); err != nil {
		t.Fatal(err)
	}
	first, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := putModule(ctx, obs, name, module); err != nil {
		t.Fatal(err)
	}
	again, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if again.NUID != first.NUID {
		t.Fatalf("publishing the same module again stored it again (chunks %s, then %s): a reader of the first chunks loses them", first.NUID, again.NUID)
	}
	if got, err := getModule(ctx, obs, name); err != nil || !bytes.Equal(got, module) {
		t.Fatalf("read back %d bytes, %v; want the %d stored", len(got), err, len(module))
	}

	other := []byte("other bytes under the name")
	if err := putModule(ctx, obs, name, other); err != nil {
		t.Fatal(err)
	}
	if got, err := getModule(ctx, obs, name); err != nil || !bytes.Equal(got, other) {
		t.Fatalf("after a different module under the name: %q, %v", got, err)
	}
	if _, err := getModule(ctx, obs, "no-such-module"); err == nil {
		t.Fatal("a module that is not stored read without an error")
	}
}
