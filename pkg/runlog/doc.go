// Package runlog is a run's events: publishing them from the services
// that do the work, and folding them into what a person looks at (a row
// per call, a summary per run).
//
// # Why a core publish into a stream
//
// Events are published with a plain core NATS publish on a subject the
// run-events stream captures (contracts.RunEventsStream). A publish is a
// write into the connection's buffer: no round trip and no goroutine per
// call, so a call's latency does not grow by the stream's acknowledgement.
// What it costs is that an event is lost when the connection is lost for
// good before the buffer is flushed (nats.go keeps publishes made while
// it reconnects); an event is a record of what happened, not what makes
// it happen, and the results stream stays the truth.
//
// # Duplicates
//
// Steps that a retry can repeat carry a Nats-Msg-Id and the stream drops a
// repeat (approval events, data-flow decisions, cancellations, run ends).
// The steps of every call carry none, to keep the server from remembering
// an id per call: they are not repeated, or they say what they are, or
// (accepted, which a client's retry of the same call publishes again)
// the fold keeps the first and drops the copies. A
// worker that takes over a call from one that died publishes started with
// the delivery number; a redelivery that finds the result already stored
// announces finished again marked Replayed. The fold keeps the first
// finished and shows the rest as such.
package runlog
