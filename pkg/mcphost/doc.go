// Package mcphost imports MCP servers' tools into graphorin. A worker with
// MCP hosting on (graphorin up, graphorin worker --mcp) follows the
// graphorin_mcp_servers bucket (graphorin mcp add/rm) and, for each
// server, keeps an MCP client session (stdio: the server's process; or
// streamable HTTP) with the official Go SDK and a host (pkg/host) that
// serves its tools on the bus like any other tool.
//
// Each tool is registered with source {kind: mcp, serverIdentity}, so its
// trust class is mcp-derived (REF-D10): its output is scanned, stripped
// and wrapped (REF-D11) and labelled untrusted for the data-flow gate
// (REF-F1). Name collisions with other sources resolve as usual (REF-R4,
// R5: github-enterprise.search). Its side-effect class comes from its
// annotations (SideEffectClass; external-stateful when it has none,
// REF-D2), its schemas are the ones it declares, and calls reach it with
// the call's deadline, cancellation (notifications/cancelled) and trace
// context (_meta traceparent).
//
// # Why one host per server
//
// A host beats its own heartbeat. A server whose session ends - its
// process died, its connection broke - has its host stopped at once, and
// with the heartbeat gone the dispatchers fail its tools' calls as
// unavailable instead of queueing them for nobody. The server is started
// again after a backoff (doubling to 30 s), and a new host registers the
// tools it lists then. tools/list_changed starts a host for the new list
// before the old one stops, and removes the registrations of tools that
// are gone.
//
// # Secrets
//
// A server's secrets (environment variables of a stdio server, headers or
// a bearer token for an HTTP one) are named in its definition and looked
// up in the worker's secrets store when it starts; the catalogue lists the
// names as the tools' secretsAllowed, never the values, and the host
// redacts the values from everything a call returns. A stdio server
// inherits only PATH, HOME, LANG and TMPDIR from the worker.
//
// # Resource links
//
// A resource_link in a result is shown to the model as a handle
// mcp:<server>:<uri> (REF-T12) and recorded as issued in the call's run.
// read_result (the spill service) asks the server's hosts, on
// _GRAPHORIN.mcp.resource.<server>, to make it readable: a link issued in
// that run is read from that server, once, into the spill store under the
// run, tagged mcp-derived, and paged and re-sanitized from there; any
// other handle - another run's, made up - is refused like a bad spill
// handle.
package mcphost
