// Package approver will hold the durable queue of calls waiting for a human
// decision (REF-X11) and serve the decisions from the CLI and a web page.
//
// It has no behaviour yet (issue 6). Until it lands, no tool declares
// needsApproval, so nothing waits for one.
package approver
