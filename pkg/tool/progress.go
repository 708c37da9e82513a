package tool

import "context"

// ProgressReporter receives the progress a call reports; hosts put one in
// the call's context (WithProgress).
type ProgressReporter interface {
	ReportProgress(done, total float64, message string)
}

// WithProgress returns ctx carrying r.
func WithProgress(ctx context.Context, r ProgressReporter) context.Context {
	return withField(ctx, func(inv *Invocation) { inv.Progress = r })
}

// Progress reports how far the call running in ctx is: done of total units
// (rows, bytes, pages: the tool's own; total 0 when unknown) and, in a few
// words, what it is doing. Call it as often as is convenient: the host
// passes on a report at most every 100 ms (and always the last one, done
// = total), as a run event on events.run.<run>.<call>.progress that
// `graphorin call` draws as a progress bar and the MCP server forwards as
// a progress notification. It returns at once, and does nothing when no
// host runs the call (a test calling the function directly).
func Progress(ctx context.Context, done, total float64, message string) {
	if inv := invocationOf(ctx); inv != nil && inv.Progress != nil {
		inv.Progress.ReportProgress(done, total, message)
	}
}
