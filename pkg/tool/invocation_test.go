package tool_test

import (
	"context"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

type secrets map[string]string

func (s secrets) ReadSecret(key string) (string, bool, error) { v, ok := s[key]; return v, ok, nil }

type progress struct{ done float64 }

func (p *progress) ReportProgress(done, _ float64, _ string) { p.done = done }

// TestInvocationParts: the parts of a call's context read the same
// whether a host sets them one by one or all at once, and the innermost
// setting of each part wins: one set later keeps the others.
func TestInvocationParts(t *testing.T) {
	ctx := context.Background()
	if _, ok := tool.CallFrom(ctx); ok {
		t.Fatal("a context no host set names a call")
	}
	tool.Progress(ctx, 1, 1, "") // no reporter: nothing happens
	tool.WidenTaint(ctx, contracts.OutputTaint{Untrusted: true})

	rec, prog := &tool.TaintRecorder{}, &progress{}
	whole := tool.WithInvocation(ctx, &tool.Invocation{Call: tool.Call{CallID: "a"}, HasCall: true,
		Secrets: secrets{"k": "v"}, Taint: rec, Progress: prog})
	oneByOne := tool.WithProgress(tool.WithTaintRecorder(tool.WithSecrets(tool.WithCall(ctx, tool.Call{CallID: "a"}), secrets{"k": "v"}), rec), prog)
	for name, c := range map[string]context.Context{"at once": whole, "one by one": oneByOne} {
		if call, ok := tool.CallFrom(c); !ok || call.CallID != "a" {
			t.Errorf("%s: call %+v, %v", name, call, ok)
		}
		if v, err := tool.Secret(c, "k"); err != nil || v != "v" {
			t.Errorf("%s: secret %q, %v", name, v, err)
		}
		tool.Progress(c, 3, 4, "")
		if prog.done != 3 {
			t.Errorf("%s: progress not reported", name)
		}
		prog.done = 0
	}
	tool.WidenTaint(whole, contracts.OutputTaint{Untrusted: true, TrustClass: "untrusted-web"})
	if got := rec.Taint(); got == nil || !got.Untrusted {
		t.Errorf("taint not recorded: %+v", got)
	}

	inner := tool.WithCall(whole, tool.Call{CallID: "b"})
	if call, _ := tool.CallFrom(inner); call.CallID != "b" {
		t.Errorf("the inner call is %q, want b", call.CallID)
	}
	if v, _ := tool.Secret(inner, "k"); v != "v" {
		t.Errorf("setting the call lost the secrets: %q", v)
	}
	if call, _ := tool.CallFrom(whole); call.CallID != "a" {
		t.Errorf("the outer context changed: %q", call.CallID)
	}
}
