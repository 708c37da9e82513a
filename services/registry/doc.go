// Package registry will own the tool catalogue: cross-source collision
// resolution (REF-R2..R6), worker liveness and tool_search (REF-R7, R8).
//
// It has no behaviour yet. Until it lands, workers announce their tools
// straight into the catalogue bucket (pkg/catalog.Announce) and every
// dispatcher follows it with a KV watch; issue 3 puts this service between
// the two.
package registry
