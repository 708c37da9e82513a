// Package codemode hosts code-mode on the bus (REF-K4..K7): the built-in
// tools code_execute, which runs a model-written JavaScript body in an
// engine of pkg/codemode (a confined process per script, or WebAssembly),
// and code_search, which shows the model the signatures of the tools such
// a script can call. Any client calls them like any tool:
// tools.call.code_execute with {"source": "…"}. Both are listed as soon as
// the host runs, before its engine is ready (Config.Engine may be a
// pkg/codemode Pending): a script that arrives first waits for the engine
// a few seconds, or is answered rate_limited, recoverable, with a time to
// retry, never "no such tool".
//
// Each tools.x(args) a script makes is an ordinary tools.call.x request
// (pkg/client), with the code call's run id and the call id
// contracts.CodeCallID(<code call id>, seq), and the code call's trace
// context, so the dispatcher's tool.call span of each nested call is a
// child of the code call's execute_tool span. The dispatcher validates,
// asks for approval, applies the data-flow gate and routes it; a worker
// bounds, sanitizes and redacts it, exactly as a direct call: this
// service adds no governance of its own and has no way around it.
//
// # Why a service of its own
//
// The code-mode host could have been a flag of the sandbox worker. It is
// a service because it is a different kind of principal: it *calls*
// tools (tools.call.>, as an agent does) where a worker runs them and
// may never call one (nats.conf denies workers tools.call.>). Keeping the
// two apart keeps that rule whole: a compromised worker still cannot
// call tools, and the codemode user of nats.conf may call tools and host
// its two, nothing more. It also sizes differently: each running script
// holds an engine instance (up to the engine's memory ceiling), so its
// slots are counted in scripts, not in Go calls, and it scales on its own
// (`graphorin codemode`, any number of them; `graphorin up` starts one).
//
// # Crash safety: a replay answered from stored results
//
// code_execute is pulled from the exec stream like any tool. If the host
// running a script dies, the call is redelivered (after AckWait) to
// another host, which runs the script again from the start: a replay.
// The script is deterministic given its inputs (pkg/codemode,
// "Determinism"): Math.random is seeded from a hash of the code call's
// run and call id, the clock starts at the moment the dispatcher accepted
// the code call (the same on every delivery), and results are delivered
// in call order. So the replay makes the same calls, with the same ids,
// and each call the first run made is answered from its stored result
// (the results stream, by run and call id) without reaching a tool
// again. A call that was in flight when the host died is sent again with
// its ids: the dispatcher's dedupe answers it with the first copy's
// result once stored, and a side effect is guarded by the workers' effect
// ledger besides, so no effect runs twice.
//
// A replay compares each stored call with the one it makes now: another
// tool, or arguments whose InputHash differs, fails the code call with a
// divergence error (execution_failed) rather than answering a different
// call with a stored result. (Only the calls with a stored result can be
// compared: a call the dispatcher refused without running, as invalid or
// blocked, has none, and is simply sent again.)
//
// A call is a replay when the host delivers it again, when it resumes
// after an approval, or when the stored result of its first nested call
// exists (a client that sent the code call again after the dispatcher's
// dedupe window). Only a replay looks stored results up, so a first run
// pays for one lookup, not one per call, and makes it while the engine
// starts the script.
//
// # Approvals
//
// By default (ApprovalsRefuse, as the reference) a tool that may need a
// person's approval is in the script's tools object but refused: calling
// it throws "<name> requires human approval; …", which the script may
// catch, and code_search marks it. Approvals are given to direct calls,
// which a person sees one at a time.
//
// ApprovalsPause is the operator's opt-in (never the model's): an
// approval-gated call goes to the dispatcher like any other, and when it
// answers awaiting_approval the script pauses. The code call then answers
// awaiting_approval with that approval's id (stored as a not-final result
// under the code call's ids), after the pause is stored in the
// graphorin_codemode bucket under the approval id. A shared durable
// consumer of the approval decisions (the approver's events) finds the
// pause and publishes the code call again on the exec stream, with
// Resume set and a message id of its own, so that one host resumes it
// once. The resume is a replay: the calls made before are answered from
// their results, the decided call from its result (the dispatchers ran a
// grant, or stored a denial as approval_denied, which throws inside the
// script), and the script goes on to completion; its result is stored
// under the code call's ids, where a fetch finds it. Every step is in a
// stream or a bucket, so all of it survives restarts, and a host that dies
// during the resume leaves a redelivery behind.
//
// # Taint
//
// The data-flow gate needs nothing from here: the nested calls carry the
// run id, so each untrusted output a script reads is recorded in the
// run's ledger by the dispatcher, and a sink the script calls with it is
// blocked exactly as a direct call would be. What this service adds is
// the label of the code call's own output: the widest label of the
// outputs the script read (REF-D12, tool.WidenTaint). A script that read
// a web page returns untrusted output: sanitized and wrapped under the
// web page's trust class, labelled so on the wire (the result's "taint"),
// and recorded in the ledger by the dispatcher, so that text the script
// derived from the page (decoded, reassembled) is caught too. An error
// that ends such a script is sanitized the same way.
package codemode
