package tool

import "context"

// Invocation is what a host puts in the context of a call it runs: the
// call, its secrets, the recorder of its taint and the reporter of its
// progress. It is one context value, read by CallFrom, Secret, WidenTaint
// and Progress: a host setting all four with WithInvocation makes one
// context, where WithCall, WithSecrets, WithTaintRecorder and
// WithProgress make one each (a value lookup walks every context between
// the tool and its host, and each is an allocation per call).
type Invocation struct {
	Call     Call
	HasCall  bool // Call is set
	Secrets  SecretReader
	Taint    *TaintRecorder
	Progress ProgressReporter
}

type invocationKey struct{}

// WithInvocation returns ctx carrying inv, in place of whatever the
// contexts around it set.
func WithInvocation(ctx context.Context, inv *Invocation) context.Context {
	return context.WithValue(ctx, invocationKey{}, inv)
}

// invocationOf is the invocation ctx carries, or nil.
func invocationOf(ctx context.Context) *Invocation {
	inv, _ := ctx.Value(invocationKey{}).(*Invocation)
	return inv
}

// withField returns ctx carrying the invocation it carried with set
// applied to a copy: the innermost setting of each part wins, as it does
// for context values of their own.
func withField(ctx context.Context, set func(*Invocation)) context.Context {
	var inv Invocation
	if cur := invocationOf(ctx); cur != nil {
		inv = *cur
	}
	set(&inv)
	return WithInvocation(ctx, &inv)
}
