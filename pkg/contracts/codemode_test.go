package contracts

import (
	"strings"
	"testing"
)

func TestCodeCallID(t *testing.T) {
	long := strings.Repeat("c", MaxIDLen)
	tests := []struct {
		name, parent string
		seq          int
		want         string
	}{
		{"short", "call_1", 3, "call_1-3"},
		{"fits exactly", strings.Repeat("c", MaxIDLen-3), 64, strings.Repeat("c", MaxIDLen-3) + "-64"},
		{"too long", long, 7, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CodeCallID(tt.parent, tt.seq)
			if err := ValidateID("call id", got); err != nil {
				t.Fatalf("got %q, not a call id: %v", got, err)
			}
			if tt.want != "" && got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			if tt.want == "" && (!strings.HasPrefix(got, "cm_") || !strings.HasSuffix(got, "-7")) {
				t.Fatalf("got %q, want a hashed cm_…-7", got)
			}
		})
	}
	// Deterministic, and distinct per parent and per seq.
	if CodeCallID(long, 1) != CodeCallID(long, 1) || CodeCallID(long, 1) == CodeCallID(long, 2) ||
		CodeCallID(long, 1) == CodeCallID(long[:MaxIDLen-1]+"d", 1) {
		t.Fatal("hashed ids are not deterministic and distinct")
	}
}

func TestIsCodeExecute(t *testing.T) {
	for _, tt := range []struct {
		def  ToolDefinition
		want bool
	}{
		{ToolDefinition{Name: CodeExecuteName, Source: CodeModeSource}, true},
		{ToolDefinition{Name: CodeExecuteName, Source: Source{Kind: SourceFirstParty}}, false},
		{ToolDefinition{Name: CodeExecuteName, Source: Source{Kind: SourceBuiltIn, Subsystem: "other"}}, false},
		{ToolDefinition{Name: CodeSearchName, Source: CodeModeSource}, false},
	} {
		if got := IsCodeExecute(&tt.def); got != tt.want {
			t.Errorf("%s from %s: got %v, want %v", tt.def.Name, tt.def.Source.ID(), got, tt.want)
		}
	}
}
