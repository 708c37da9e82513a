// Package registry owns the tool catalogue.
//
// Hosts (workers, and services with built-in tools) write their tools as
// declared into the registrations bucket, with compare-and-set, each
// stamped with the revision that created it. Every registry instance
// watches that bucket and computes the catalogue from it: a pure function
// of the registrations (cross-source collisions resolved per REF-R2..R6,
// examples folded into model-facing descriptions per REF-D7/D8), so two
// instances given the same registrations write the same catalogue. Writes
// to the catalogue bucket are compare-and-set too, and an entry computed
// from a later snapshot of the registrations is never overwritten by one
// computed from an earlier snapshot.
//
// A registry also serves graphorin.registry.tools (the catalogue with each
// tool's live workers and backlog, from worker heartbeats and the exec
// stream), and hosts the built-in tool_search (REF-R7, R8), which the
// catalogue lists only while some tool is deferred.
package registry
