// Package mcpserve is `graphorin mcp serve`: the governed catalogue as one
// MCP server, over stdio or streamable HTTP, built with the official Go
// SDK. It is a client of the bus like the CLI: every tools/call is a
// tools.call.<tool> request, so an MCP client gets validation, approvals,
// the taint ledger and the data-flow gate, bounded and spilled results,
// and tracing, exactly as any caller does. It never reaches a worker.
//
//   - tools/list is the model-facing catalogue (pkg/tooldefs, format mcp):
//     resolved names in order, examples folded (REF-D8), deferred tools
//     hidden and tool_search listed, input and output schemas, annotations
//     from the side-effect class; each identity sees only the tools it may
//     call, and is told when the catalogue changes (list_changed).
//   - tools/call answers with the result: errors as isError results with
//     the error kind (REF-X7, X10); a call that needs approval at once,
//     with the approval id; the same call (same arguments, same run) sent
//     again finds it and returns its result once decided; a spilled result
//     as a resource_link that resources/read serves to its run's identity.
//     A cancelled call (notifications/cancelled) is cancelled on the bus
//     (tools.cancel.<run>.<call>); traceparent in _meta continues the trace.
//   - Who may call what: over HTTP, bearer tokens map to identities with
//     tool patterns (Access); without an access file the listener is on
//     loopback only. Every call's identity is in its audit row
//     (mcp:tool:call).
//
// # Both revisions on one endpoint
//
// Over HTTP, /mcp serves the stateless revision (2026-07-28: no
// initialize, no session id, per-request _meta, server/discover, list
// results with ttlMs and cacheScope) to requests whose
// MCP-Protocol-Version names it, and sessions (initialize, negotiated
// down to 2025-06-18 and older) to every other request. Over stdio the
// SDK answers both (server/discover or initialize). tools/list is
// "private" (each identity sees its own tools) and fresh for 5 s; a
// spilled result read with resources/read is private too; the rest is
// public. Every SSE stream starts with a retry field (SEP-1699), and a
// session's streams can be resumed with Last-Event-ID.
//
// # Runs and call identity
//
// MCP has no run or call ids, so this service gives them: a call's run is
// its identity's namespace (mcp_<8 hex>_) plus the run the client names in
// the request's _meta ("graphorin/runId"), or the configured --run-id, or
// its MCP session; two identities never share a run. A stateless request
// has no session: without graphorin/runId, its run is the identity's
// standing stateless run, the same on every mcp serve and after a restart.
// So in the stateless revision an approval works as in a session: the
// call answers at once with the approval id, and the same identity
// sending the same tool and arguments again (with the same
// graphorin/runId, if it named one), or sending graphorin/callId, gets
// the call's result once a person has decided. A call that waits
// for approval is remembered (bucket graphorin_mcp_calls) by run, tool
// and arguments: sending the same arguments again in the same run is the
// same call. A client that wants to pick its call ids sends
// "graphorin/callId" in _meta. Every result's _meta says its runId,
// callId and status.
package mcpserve
