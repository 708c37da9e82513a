package wasm

// Running reports how many calls hold one of r's slots, for tests that
// must wait until a call is under way.
func Running(r *Runtime) int { return len(r.slots) }
