package tool_test

import (
	"context"
	"errors"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

func TestWidenTaint(t *testing.T) {
	var r tool.TaintRecorder
	ctx := tool.WithTaintRecorder(context.Background(), &r)
	tool.WidenTaint(ctx, contracts.OutputTaint{}) // nothing to widen
	if got := r.Taint(); got != nil {
		t.Fatalf("got %+v after an empty taint, want nil", got)
	}
	tool.WidenTaint(ctx, contracts.OutputTaint{Untrusted: true, TrustClass: "web-search", SourceKind: "web-search"})
	tool.WidenTaint(ctx, contracts.OutputTaint{Untrusted: true, TrustClass: "mcp-derived", SourceKind: "mcp"})
	tool.WidenTaint(ctx, contracts.OutputTaint{Sensitive: true})
	want := contracts.OutputTaint{Untrusted: true, Sensitive: true, TrustClass: "web-search", SourceKind: "web-search"}
	if got := r.Taint(); got == nil || *got != want {
		t.Fatalf("got %+v, want %+v (widened, the first untrusted producer named)", got, want)
	}
	tool.WidenTaint(context.Background(), want) // no recorder: nothing happens
}

func TestAwaitingApprovalPassesThrough(t *testing.T) {
	tl, err := tool.Define(tool.Spec[struct{}, string]{
		Name: "t.wait", Description: "Waits.", SideEffectClass: contracts.SideEffecting, Replays: true,
		Run: func(context.Context, struct{}) (string, error) {
			return "", &tool.AwaitingApproval{ApprovalID: "apr_0123456789abcdef01234567"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tl.Replays() {
		t.Fatal("Replays() is false")
	}
	for _, n := range tl.Notices() {
		if n.Code == tool.NoticeIdempotencyKeyMissing {
			t.Fatalf("a replaying tool got notice %q: it makes its own effects once", n.Message)
		}
	}
	_, err = tl.Invoke(context.Background(), []byte(`{}`))
	var aw *tool.AwaitingApproval
	if !errors.As(err, &aw) || aw.ApprovalID != "apr_0123456789abcdef01234567" {
		t.Fatalf("got %v (%T), want the *AwaitingApproval as returned, not an execution_failed", err, err)
	}
}
