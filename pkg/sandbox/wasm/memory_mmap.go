//go:build linux || darwin

package wasm

import "syscall"

// mmapRegion reserves the whole ceiling of address space up front, with no
// access, and makes pages readable and writable as the guest grows into
// them. Growing never copies and never moves the memory; pages the guest
// never touches cost no RAM; release gives everything back to the kernel
// at once, instead of leaving a garbage slice for the Go collector and
// scavenger to return later. That is what keeps the worker's resident
// size flat after a memory bomb.
type mmapRegion struct {
	mem       []byte // the reservation, len == reserve
	committed uint64 // bytes made accessible so far
}

func newRegion(reserve uint64) region {
	if reserve == 0 {
		return newHeapRegion(0)
	}
	mem, err := syscall.Mmap(-1, 0, int(reserve), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return newHeapRegion(reserve)
	}
	return &mmapRegion{mem: mem}
}

func (m *mmapRegion) grow(size uint64) []byte {
	if size > m.committed {
		// Wasm pages are 64 KiB, a multiple of every OS page size, so
		// the range is page-aligned. Fresh anonymous pages read as zero,
		// as memory.grow requires.
		if err := syscall.Mprotect(m.mem[m.committed:size], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return nil
		}
		m.committed = size
	}
	return m.mem[:size:size]
}

func (m *mmapRegion) release() {
	if m.mem != nil {
		_ = syscall.Munmap(m.mem)
		m.mem = nil
	}
}
