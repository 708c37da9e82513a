package wasm

// Running reports how many calls hold one of r's slots, for tests that
// must wait until a call is under way.
func Running(r *Runtime) int { return len(r.slots) }

// Ahead reports how many instances of m wait, made ahead, for tests and
// benchmarks that must wait until the pool is full.
func Ahead(m *Module) int {
	if m.pool == nil {
		return 0
	}
	return len(m.pool.ready)
}
