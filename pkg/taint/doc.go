// Package taint will hold the pure logic of untrusted data: trust classes,
// the inbound sanitizer, the run's taint ledger and the data-flow policy
// (REF-D10, D11, S1..S4, F1..F5). No NATS.
//
// It has no behaviour yet (issue 8).
package taint
