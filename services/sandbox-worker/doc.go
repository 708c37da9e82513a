// Package sandboxworker runs tools. A worker hosts a set of tools, registers
// them, beats its heartbeat, and takes accepted calls for them from the
// exec work-queue stream through one durable pull consumer per tool, shared
// by every worker hosting it, so calls spread over workers. The call loop
// is pkg/host, which other services use for their built-in tools; this
// service is where the isolation tiers (process, WASM) will live.
//
// For each call it: runs the tool under the call's deadline with panics
// recovered (one bad tool never takes the worker down), sends InProgress
// while a long call runs, checks the output against the tool's output
// schema, writes the result to tools.result.<run>.<call> on the results
// stream (deduplicated by run and call id), tells the waiting dispatcher,
// and only then acks the exec message. A worker that dies before the ack
// leaves the message to be redelivered; the redelivery finds the stored
// result, if there is one, and does not run the tool again.
package sandboxworker
