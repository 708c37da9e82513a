package contracts

import (
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
