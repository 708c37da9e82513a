//go:build !(linux || darwin)

package wasm

func newRegion(reserve uint64) region { return newHeapRegion(reserve) }
