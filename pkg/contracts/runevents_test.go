package contracts

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRunEventSubjects(t *testing.T) {
	tests := []struct {
		subject       string
		run, call     string
		progress, bad bool
	}{
		{RunEventSubject(DefaultScope.Run("r1"), "c1"), "_._.r1", "c1", false, false},
		{RunEventSubject(DefaultScope.Run("r1"), ""), "_._.r1", "", false, false},
		{ProgressSubject(DefaultScope.Run("r1"), "c1"), "_._.r1", "c1", true, false},
		{RunEventSubject(Scope("TENANT_A.agent-a").Run("r1"), "c1"), "TENANT_A.agent-a.r1", "c1", false, false},
		{"events.run._._.r1.~run.progress", "", "", false, true},
		{"events.run._._.r1", "", "", false, true},
		{"events.run.r1.c1", "", "", false, true},
		{"events.run._._.r1.c1.other", "", "", false, true},
		{"events.run._._.r.1.c1", "", "", false, true},
		{"events.tool.approval.granted.x", "", "", false, true},
		{"events.run._._..c1", "", "", false, true},
		{"events.run.a.b!.r1.c1", "", "", false, true},
	}
	for _, tt := range tests {
		run, call, progress, err := ParseRunEventSubject(tt.subject)
		if (err != nil) != tt.bad || string(run) != tt.run || call != tt.call || progress != tt.progress {
			t.Errorf("%s: got %q %q %v %v, want %q %q %v (error %v)", tt.subject, run, call, progress, err, tt.run, tt.call, tt.progress, tt.bad)
		}
	}
	// Every event of a run, and nothing of another.
	if f := RunFilter(DefaultScope.Run("r1")); f != "events.run._._.r1.>" {
		t.Errorf("filter %q", f)
	}
}

func FuzzParseRunEventSubject(f *testing.F) {
	for _, s := range []string{"events.run.r1.c1", "events.run.r1.~run", "events.run.r1.c1.progress", "events.run.", "events.run.a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		run, call, progress, err := ParseRunEventSubject(s)
		if err != nil {
			return
		}
		// What parses is rebuilt exactly.
		want := RunEventSubject(run, call)
		if progress {
			want = ProgressSubject(run, call)
		}
		if want != s {
			t.Fatalf("%q parsed as %q %q %v, which is %q", s, run, call, progress, want)
		}
	})
}

func FuzzDecodeRunEvent(f *testing.F) {
	for _, s := range []string{`{"type":"finished","runId":"r1","callId":"c1","at":"2026-12-01T10:00:00Z","status":"ok","errorKind":"timeout"}`,
		`{"type":"progress","runId":"r1","progress":{"done":1,"total":2}}`, `{}`, `{"type":"x","runId":"bad id"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeRunEvent(b)
		if err != nil {
			return
		}
		if ev.Type == "" || ValidateID("run id", ev.RunID) != nil || (ev.CallID != "" && ValidateID("call id", ev.CallID) != nil) {
			t.Fatalf("accepted %+v", ev)
		}
	})
}

// TestDecodeRunEventMsgTakesTheCallFromItsSubject: an event's body leaves
// out what its subject names (run, call, scope); the reader takes them
// from the subject, still reads bodies that name them (events stored
// before), and refuses a body that names another call than its subject.
func TestDecodeRunEventMsgTakesTheCallFromItsSubject(t *testing.T) {
	ev := &RunEvent{Type: EventFinished, RunID: "run-1", CallID: "call-1", Scope: "acme.alice", Tool: "echo", Status: StatusOK}
	subject := RunEventSubject(ev.Run(), ev.CallID)
	body, _ := json.Marshal(RunEventBody(ev))
	if strings.Contains(string(body), "run-1") || strings.Contains(string(body), "call-1") || strings.Contains(string(body), "acme") {
		t.Fatalf("the body repeats what the subject names: %s", body)
	}
	got, err := DecodeRunEventMsg(subject, body)
	if err != nil || got.RunID != "run-1" || got.CallID != "call-1" || got.Scope != "acme.alice" || got.Tool != "echo" || got.Status != StatusOK {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	full, _ := json.Marshal(ev)
	if got, err := DecodeRunEventMsg(subject, full); err != nil || got.Run() != ev.Run() || got.CallID != "call-1" {
		t.Fatalf("a body naming its call: %+v, %v", got, err)
	}
	for _, other := range []RunEvent{{RunID: "run-2"}, {CallID: "call-2"}, {Scope: "evil.mallory"}} {
		o := *ev
		if other.RunID != "" {
			o.RunID = other.RunID
		}
		if other.CallID != "" {
			o.CallID = other.CallID
		}
		if other.Scope != "" {
			o.Scope = other.Scope
		}
		b, _ := json.Marshal(&o)
		if _, err := DecodeRunEventMsg(subject, b); err == nil {
			t.Errorf("a body naming %+v under %s was accepted", other, subject)
		}
	}
	// The default tenant's events omit their scope; progress and the
	// run's own events have subjects of their own.
	p := &RunEvent{Type: EventProgress, RunID: "r", CallID: "c", Progress: &Progress{Done: 1}}
	b, _ := json.Marshal(RunEventBody(p))
	if got, err := DecodeRunEventMsg(ProgressSubject(DefaultScope.Run("r"), "c"), b); err != nil || got.Scope != "" || got.RunID != "r" || got.CallID != "c" || got.Progress == nil {
		t.Fatalf("progress: %+v, %v", got, err)
	}
	end := &RunEvent{Type: EventRunEnded, RunID: "r", RunStatus: "completed"}
	b, _ = json.Marshal(RunEventBody(end))
	if got, err := DecodeRunEventMsg(RunEventSubject(DefaultScope.Run("r"), ""), b); err != nil || got.RunID != "r" || got.CallID != "" {
		t.Fatalf("run-level: %+v, %v", got, err)
	}
	if _, err := DecodeRunEventMsg("events.tool.approval.granted.x", b); err == nil {
		t.Error("an event on a subject that is no run's was accepted")
	}
}
