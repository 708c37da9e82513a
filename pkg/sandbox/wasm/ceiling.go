package wasm

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
)

// Ceiling enforces a memory ceiling on one wazero instance the way Call
// does on each of its calls (doc.go, "Why the ceiling is enforced in an
// allocator"): it grants linear memory up to the ceiling, refuses any grow
// past it, and remembers that it did, so that the caller can report the
// end of the instance as a sandbox violation rather than as whatever the
// guest did when its grow failed.
//
// It is for code in this module that instantiates guests itself because
// Call's shape (input in, output out) does not fit: pkg/codemode keeps an
// instance alive across a conversation on stdin and stdout. Such code
// must leave wazero's page limit at its default, as NewRuntime does, so
// that every grow reaches the allocator.
//
// A Ceiling serves one instantiation. Refused and Peak may be read once
// the instance has stopped running; Release must be called after that,
// and after the instance is closed.
type Ceiling struct {
	mem callMemory
}

// NewCeiling returns a Ceiling of limitBytes, rounded down to whole 64 KiB
// pages (at least one page, at most 4 GiB).
func NewCeiling(limitBytes uint64) *Ceiling {
	limit := min(max(limitBytes/pageSize*pageSize, pageSize), maxMemoryBytes)
	return &Ceiling{mem: callMemory{ceiling: limit}}
}

// Context returns ctx carrying the allocator; pass it to
// wazero.Runtime.InstantiateModule.
func (c *Ceiling) Context(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, &c.mem)
}

// Limit returns the ceiling in bytes.
func (c *Ceiling) Limit() uint64 { return c.mem.ceiling }

// Refused returns the largest memory size the guest asked for and was
// refused, 0 if none.
func (c *Ceiling) Refused() uint64 { return c.mem.refused }

// Peak returns the largest memory size granted.
func (c *Ceiling) Peak() uint64 { return c.mem.peak }

// Release gives the memory back (see callMemory.release).
func (c *Ceiling) Release() { c.mem.release() }
