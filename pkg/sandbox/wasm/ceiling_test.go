package wasm

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero/experimental"
)

func TestCeiling(t *testing.T) {
	tests := []struct {
		name      string
		limit     uint64
		wantLimit uint64
	}{
		{"whole pages", 4 * pageSize, 4 * pageSize},
		{"rounded down", 4*pageSize + 1, 4 * pageSize},
		{"at least a page", 1, pageSize},
		{"at most 4 GiB", 1 << 40, maxMemoryBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCeiling(tt.limit)
			if got := c.Limit(); got != tt.wantLimit {
				t.Fatalf("got limit %d, want %d", got, tt.wantLimit)
			}
		})
	}

	t.Run("refuses and records a grow past the ceiling", func(t *testing.T) {
		c := NewCeiling(2 * pageSize)
		defer c.Release()
		if c.Context(context.Background()) == nil {
			t.Fatal("got a nil context")
		}
		var alloc experimental.MemoryAllocator = &c.mem // what Context hands wazero
		mem := alloc.Allocate(pageSize, maxMemoryBytes)
		if b := mem.Reallocate(2 * pageSize); len(b) != 2*pageSize {
			t.Fatalf("got %d bytes for a grow to the ceiling, want %d", len(b), 2*pageSize)
		}
		if b := mem.Reallocate(3 * pageSize); b != nil {
			t.Fatalf("got %d bytes for a grow past the ceiling, want nil", len(b))
		}
		if got, want := c.Refused(), uint64(3*pageSize); got != want {
			t.Fatalf("got Refused %d, want %d", got, want)
		}
		if got, want := c.Peak(), uint64(2*pageSize); got != want {
			t.Fatalf("got Peak %d, want %d", got, want)
		}
	})
}
