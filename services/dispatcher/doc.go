// Package dispatcher is the intake of tool calls. It serves tools.call.> in
// a queue group, so any number of dispatchers share the load. For each call
// it resolves the tool from its catalogue cache, decodes and validates the
// input against the tool's JSON Schema, and publishes the accepted call to
// the exec work-queue stream with the run and call id as the dedupe id. It
// then waits for the worker's notice and replies with the result, in the
// request's encoding.
//
// Every failure is a reply with an error kind, never a hung request. A
// dispatcher that dies after accepting a call loses nothing: the call is in
// the stream, a worker runs it, and its result is stored where
// graphorin.results.get.<run>.<call> (also served here) finds it.
package dispatcher
