package wasm

import (
	"github.com/tetratelabs/wazero/experimental"
)

// pageSize is the size of a WebAssembly memory page.
const pageSize = 65536

// region is the backing store of one linear memory. It grows in place or
// by copying; release gives it back once no instance can touch it.
type region interface {
	// grow makes the memory size bytes long and returns it, or nil when it
	// cannot.
	grow(size uint64) []byte
	release()
}

// callMemory is the memory allocator of one call (see doc.go, "Why the
// ceiling is enforced in an allocator"). wazero asks it for every byte of
// linear memory the instance gets, so it sees each memory.grow the guest
// makes, including the ones that would pass the ceiling: those it refuses
// (the guest's memory.grow returns -1) and records, so that the call's end
// can be reported as a sandbox violation rather than an ordinary failure.
//
// One callMemory serves one instantiation, on the goroutine that runs the
// guest; the deadline watcher never touches it.
type callMemory struct {
	ceiling uint64   // bytes, a multiple of pageSize
	regions []region // every memory handed out, released by release
	peak    uint64   // the largest size granted
	refused uint64   // the largest size refused, 0 if none
}

var _ experimental.MemoryAllocator = (*callMemory)(nil)

// Allocate implements experimental.MemoryAllocator. max is the module's
// declared maximum (or wazero's page limit when it declares none).
func (c *callMemory) Allocate(_, max uint64) experimental.LinearMemory {
	reserve := min(max, c.ceiling)
	r := newRegion(reserve)
	c.regions = append(c.regions, r)
	return &linearMemory{call: c, region: r, reserve: reserve}
}

// release frees every region. It runs after the instance is closed and
// the call has returned, never from wazero's Free: wazero may free an
// instance's memory from Runtime.Close, and an mmap'd region must not be
// unmapped while a guest can still run on it.
func (c *callMemory) release() {
	for _, r := range c.regions {
		r.release()
	}
	c.regions = nil
}

// linearMemory is the experimental.LinearMemory wazero sees.
type linearMemory struct {
	call    *callMemory
	region  region
	reserve uint64
}

// Reallocate implements experimental.LinearMemory.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.reserve {
		if size > m.call.ceiling {
			m.call.refused = max(m.call.refused, size)
		}
		return nil
	}
	b := m.region.grow(size)
	if b != nil {
		m.call.peak = max(m.call.peak, size)
	}
	return b
}

// Free implements experimental.LinearMemory. It does nothing; see release.
func (m *linearMemory) Free() {}

// heapRegion backs a memory with a Go slice, growing it by doubling (up to
// its reserve) so that a guest growing page by page does not copy its
// memory every time. It is the fallback where mmap is not available.
type heapRegion struct {
	buf     []byte
	reserve uint64
}

func newHeapRegion(reserve uint64) *heapRegion { return &heapRegion{reserve: reserve} }

func (h *heapRegion) grow(size uint64) []byte {
	if size <= uint64(cap(h.buf)) {
		// The tail of the capacity was zeroed by make and never handed out.
		h.buf = h.buf[:size]
		return h.buf
	}
	c := min(max(size, 2*uint64(cap(h.buf))), h.reserve)
	nb := make([]byte, size, c)
	copy(nb, h.buf)
	h.buf = nb
	return h.buf
}

func (h *heapRegion) release() { h.buf = nil }
