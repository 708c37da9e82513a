// Package spill will serve results spilled to the JetStream object store:
// read_result paging, run clean-up and the sweep (REF-T6..T11).
//
// It has no behaviour yet (issue 5). Until it lands, a result too large for
// one NATS message ends the call with an execution_failed error that says
// so; it is never sent whole over the bus.
package spill
