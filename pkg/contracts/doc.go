// Package contracts is the wire vocabulary of graphorin-go: the types that
// cross NATS (tool definitions, calls, results, errors, result handles), the
// subjects they travel on, the names of streams, buckets and consumers, and
// the codec that turns bytes from the bus into those types.
//
// It does no I/O. Every service and client imports it; nothing else names a
// subject or a stream.
//
// # Why JSON inside, msgpack at the edge
//
// Inside the system (exec messages, the results stream, the catalogue) every
// payload is JSON, so that any operator with the nats CLI can read it. A
// client that prefers msgpack sends Content-Type: application/msgpack; the
// dispatcher converts at the edge and replies in the request's encoding.
package contracts
