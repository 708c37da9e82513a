package resolve_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/services/registry/internal/resolve"
)

func reg(name string, src contracts.Source, seq uint64) resolve.Registration {
	return resolve.Registration{Name: name, Source: src, Seq: seq}
}

func TestResolve(t *testing.T) {
	const (
		fpID    = "first-party"
		ghID    = "mcp:GitHub"
		codeID  = "built-in:code"
		trusted = "skill:notes#trusted"
		untrust = "skill:scratch#untrusted"
		braveID = "web-search:brave"
	)
	ladder := []resolve.Registration{ // registered bottom of the ladder first
		reg("fetch", webSearch("brave"), 1),
		reg("fetch", mcp("GitHub"), 2),
		reg("fetch", skill("scratch", false), 3),
		reg("fetch", skill("notes", true), 4),
	}

	tests := []struct {
		name       string
		cfg        resolve.Config
		regs       []resolve.Registration
		names      map[string]int
		rejected   []int
		suppressed []int
		replaced   []int
		records    []resolve.Record
	}{
		{
			name:  "no collision, no record",
			regs:  []resolve.Registration{reg("a", mcp("GitHub"), 1), reg("b", firstParty(), 2)},
			names: map[string]int{"a": 0, "b": 1},
		},
		{
			name:  "first-party vs mcp, auto-prefix",
			regs:  []resolve.Registration{reg("search", mcp("GitHub"), 1), reg("search", firstParty(), 2)},
			names: map[string]int{"search": 1, "github.search": 0},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionAutoPrefixApplied, Winner: fpID,
				Losers: []string{ghID}, RenamedTo: "github.search", NamespaceSource: "github"}},
		},
		{
			name:  "empty strategy is auto-prefix",
			cfg:   resolve.Config{Strategy: ""},
			regs:  []resolve.Registration{reg("search", firstParty(), 1), reg("search", mcp("GitHub"), 2)},
			names: map[string]int{"search": 0, "github.search": 1},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionAutoPrefixApplied, Winner: fpID,
				Losers: []string{ghID}, RenamedTo: "github.search", NamespaceSource: "github"}},
		},
		{
			name:       "first-party vs mcp, priority",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority},
			regs:       []resolve.Registration{reg("search", mcp("GitHub"), 1), reg("search", firstParty(), 2)},
			names:      map[string]int{"search": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionFirstPartyPrecedence, Winner: fpID,
				Losers: []string{ghID}}},
		},
		{
			name:     "first-party vs mcp, manual",
			cfg:      resolve.Config{Strategy: resolve.StrategyManual},
			regs:     []resolve.Registration{reg("search", mcp("GitHub"), 1), reg("search", firstParty(), 2)},
			names:    map[string]int{"search": 1},
			rejected: []int{0},
			records: []resolve.Record{
				{Tool: "search", Action: resolve.ActionFirstPartyPrecedence, Winner: fpID, Losers: []string{ghID}},
				{Tool: "search", Action: resolve.ActionManualRejected, Winner: fpID, Losers: []string{ghID}},
			},
		},
		{
			name:       "boost cannot beat first-party",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority, Priority: map[string]int{ghID: 1000}},
			regs:       []resolve.Registration{reg("search", mcp("GitHub"), 1), reg("search", firstParty(), 2)},
			names:      map[string]int{"search": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionFirstPartyPrecedence, Winner: fpID,
				Losers: []string{ghID}}},
		},
		{
			name:  "built-in vs trusted skill, auto-prefix",
			regs:  []resolve.Registration{reg("run", skill("notes", true), 1), reg("run", builtIn("code"), 2)},
			names: map[string]int{"run": 1, "notes.run": 0},
			records: []resolve.Record{{Tool: "run", Action: resolve.ActionAutoPrefixApplied, Winner: codeID,
				Losers: []string{trusted}, RenamedTo: "notes.run", NamespaceSource: "notes"}},
		},
		{
			name:       "built-in vs trusted skill, priority",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority},
			regs:       []resolve.Registration{reg("run", skill("notes", true), 1), reg("run", builtIn("code"), 2)},
			names:      map[string]int{"run": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "run", Action: resolve.ActionFirstPartyPrecedence, Winner: codeID,
				Losers: []string{trusted}}},
		},
		{
			name:       "built-in vs first-party: the earlier wins",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority},
			regs:       []resolve.Registration{reg("run", firstParty(), 7), reg("run", builtIn("code"), 3)},
			names:      map[string]int{"run": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "run", Action: resolve.ActionFirstPartyPrecedence, Winner: codeID,
				Losers: []string{fpID}}},
		},
		{
			name:  "ladder, auto-prefix",
			regs:  ladder,
			names: map[string]int{"fetch": 3, "brave.fetch": 0, "github.fetch": 1, "scratch.fetch": 2},
			records: []resolve.Record{
				{Tool: "fetch", Action: resolve.ActionAutoPrefixApplied, Winner: trusted, Losers: []string{braveID},
					RenamedTo: "brave.fetch", NamespaceSource: "brave"},
				{Tool: "fetch", Action: resolve.ActionAutoPrefixApplied, Winner: trusted, Losers: []string{ghID},
					RenamedTo: "github.fetch", NamespaceSource: "github"},
				{Tool: "fetch", Action: resolve.ActionAutoPrefixApplied, Winner: trusted, Losers: []string{untrust},
					RenamedTo: "scratch.fetch", NamespaceSource: "scratch"},
			},
		},
		{
			name:       "ladder, priority",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority},
			regs:       ladder,
			names:      map[string]int{"fetch": 3},
			suppressed: []int{0, 1, 2},
			records: []resolve.Record{{Tool: "fetch", Action: resolve.ActionPriorityResolved, Winner: trusted,
				Losers: []string{braveID, ghID, untrust}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name:     "ladder, manual",
			cfg:      resolve.Config{Strategy: resolve.StrategyManual},
			regs:     ladder,
			names:    map[string]int{"fetch": 3},
			rejected: []int{0, 1, 2},
			records: []resolve.Record{{Tool: "fetch", Action: resolve.ActionManualRejected, Winner: trusted,
				Losers: []string{braveID, ghID, untrust}}},
		},
		{
			name: "ladder without the trusted skill: untrusted skill beats mcp and web-search",
			cfg:  resolve.Config{Strategy: resolve.StrategyPriority},
			regs: ladder[:3], names: map[string]int{"fetch": 2}, suppressed: []int{0, 1},
			records: []resolve.Record{{Tool: "fetch", Action: resolve.ActionPriorityResolved, Winner: untrust,
				Losers: []string{braveID, ghID}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name:  "mcp beats web-search",
			cfg:   resolve.Config{Strategy: resolve.StrategyPriority},
			regs:  []resolve.Registration{reg("fetch", webSearch("brave"), 1), reg("fetch", mcp("GitHub"), 2)},
			names: map[string]int{"fetch": 1}, suppressed: []int{0},
			records: []resolve.Record{{Tool: "fetch", Action: resolve.ActionPriorityResolved, Winner: ghID,
				Losers: []string{braveID}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name:  "tie goes to the earlier registration, auto-prefix",
			regs:  []resolve.Registration{reg("issues", mcp("GitLab"), 5), reg("issues", mcp("GitHub"), 3)},
			names: map[string]int{"issues": 1, "gitlab.issues": 0},
			records: []resolve.Record{{Tool: "issues", Action: resolve.ActionAutoPrefixApplied, Winner: ghID,
				Losers: []string{"mcp:GitLab"}, RenamedTo: "gitlab.issues", NamespaceSource: "gitlab"}},
		},
		{
			name:       "tie goes to the earlier registration, priority",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority},
			regs:       []resolve.Registration{reg("issues", mcp("GitLab"), 5), reg("issues", mcp("GitHub"), 3)},
			names:      map[string]int{"issues": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "issues", Action: resolve.ActionPriorityResolved, Winner: ghID,
				Losers: []string{"mcp:GitLab"}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name:       "explicit boost flips the winner",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority, Priority: map[string]int{ghID: 30}},
			regs:       []resolve.Registration{reg("issues", skill("scratch", false), 1), reg("issues", mcp("GitHub"), 2)},
			names:      map[string]int{"issues": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "issues", Action: resolve.ActionPriorityResolved, Winner: ghID,
				Losers: []string{untrust}, TieBreak: resolve.TieBreakExplicitPriority}},
		},
		{
			name:       "boost to a tie: registration order decides",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority, Priority: map[string]int{ghID: 20}},
			regs:       []resolve.Registration{reg("issues", skill("scratch", false), 2), reg("issues", mcp("GitHub"), 1)},
			names:      map[string]int{"issues": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "issues", Action: resolve.ActionPriorityResolved, Winner: ghID,
				Losers: []string{untrust}, TieBreak: resolve.TieBreakExplicitPriority}},
		},
		{
			name:       "negative boost demotes",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority, Priority: map[string]int{trusted: -50}},
			regs:       []resolve.Registration{reg("x", skill("notes", true), 1), reg("x", mcp("GitHub"), 2)},
			names:      map[string]int{"x": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "x", Action: resolve.ActionPriorityResolved, Winner: ghID,
				Losers: []string{trusted}, TieBreak: resolve.TieBreakExplicitPriority}},
		},
		{
			name:       "boost on another source only: registration-order",
			cfg:        resolve.Config{Strategy: resolve.StrategyPriority, Priority: map[string]int{"mcp:other": 90, ghID: 0}},
			regs:       []resolve.Registration{reg("x", skill("notes", true), 1), reg("x", mcp("GitHub"), 2)},
			names:      map[string]int{"x": 0},
			suppressed: []int{1},
			records: []resolve.Record{{Tool: "x", Action: resolve.ActionPriorityResolved, Winner: trusted,
				Losers: []string{ghID}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name:  "boosts are ignored under auto-prefix",
			cfg:   resolve.Config{Priority: map[string]int{ghID: 30}},
			regs:  []resolve.Registration{reg("issues", skill("scratch", false), 1), reg("issues", mcp("GitHub"), 2)},
			names: map[string]int{"issues": 0, "github.issues": 1},
			records: []resolve.Record{{Tool: "issues", Action: resolve.ActionAutoPrefixApplied, Winner: untrust,
				Losers: []string{ghID}, RenamedTo: "github.issues", NamespaceSource: "github"}},
		},
		{
			name:  "sanitised namespace",
			regs:  []resolve.Registration{reg("search", firstParty(), 1), reg("search", mcp("GitHub Enterprise!!"), 2)},
			names: map[string]int{"search": 0, "github-enterprise.search": 1},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionAutoPrefixApplied, Winner: fpID,
				Losers: []string{"mcp:GitHub Enterprise!!"}, RenamedTo: "github-enterprise.search", NamespaceSource: "github-enterprise"}},
		},
		{
			name:  "empty namespace falls back to kind and hash",
			regs:  []resolve.Registration{reg("search", firstParty(), 1), reg("search", mcp("日本"), 2)},
			names: map[string]int{"search": 0, "mcp-9f26ee51.search": 1},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionAutoPrefixApplied, Winner: fpID,
				Losers: []string{"mcp:日本"}, RenamedTo: "mcp-9f26ee51.search", NamespaceSource: "mcp-9f26ee51"}},
		},
		{
			name: "rename taken by a declared name: suppressed",
			regs: []resolve.Registration{
				reg("github.search", skill("notes", true), 1),
				reg("search", mcp("GitHub"), 2),
				reg("search", firstParty(), 3),
			},
			names:      map[string]int{"github.search": 0, "search": 2},
			suppressed: []int{1},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionSuppressed, Winner: fpID,
				Losers: []string{ghID}, RenamedTo: "github.search", NamespaceSource: "github"}},
		},
		{
			name: "rename taken by a later declared name: still suppressed",
			regs: []resolve.Registration{
				reg("search", mcp("GitHub"), 1),
				reg("search", firstParty(), 2),
				reg("github.search", skill("notes", true), 3),
			},
			names:      map[string]int{"github.search": 2, "search": 1},
			suppressed: []int{0},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionSuppressed, Winner: fpID,
				Losers: []string{ghID}, RenamedTo: "github.search", NamespaceSource: "github"}},
		},
		{
			name: "rename taken by an earlier rename: the later loser is suppressed",
			regs: []resolve.Registration{
				reg("search", skill("github", false), 4),
				reg("search", mcp("GitHub"), 2),
				reg("search", firstParty(), 3),
			},
			names:      map[string]int{"search": 2, "github.search": 1},
			suppressed: []int{0},
			records: []resolve.Record{
				{Tool: "search", Action: resolve.ActionAutoPrefixApplied, Winner: fpID, Losers: []string{ghID},
					RenamedTo: "github.search", NamespaceSource: "github"},
				{Tool: "search", Action: resolve.ActionSuppressed, Winner: fpID, Losers: []string{"skill:github#untrusted"},
					RenamedTo: "github.search", NamespaceSource: "github"},
			},
		},
		{
			name: "same source re-registering: the latest stays, no record",
			regs: []resolve.Registration{
				reg("search", mcp("GitHub"), 1),
				reg("search", mcp("GitHub"), 5),
				reg("search", mcp("GitHub"), 3),
			},
			names:    map[string]int{"search": 1},
			replaced: []int{0, 2},
		},
		{
			name: "same source re-registering inside a collision",
			cfg:  resolve.Config{Strategy: resolve.StrategyPriority},
			regs: []resolve.Registration{
				reg("search", mcp("GitHub"), 1),
				reg("search", webSearch("brave"), 2),
				reg("search", mcp("GitHub"), 3),
			},
			names:      map[string]int{"search": 2},
			suppressed: []int{1},
			replaced:   []int{0},
			records: []resolve.Record{{Tool: "search", Action: resolve.ActionPriorityResolved, Winner: ghID,
				Losers: []string{braveID}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name: "the latest registration keeps its place in the order",
			// GitLab registered before GitHub's re-registration, so after
			// the replacement GitLab is the earlier and wins the tie.
			cfg: resolve.Config{Strategy: resolve.StrategyPriority},
			regs: []resolve.Registration{
				reg("issues", mcp("GitHub"), 1),
				reg("issues", mcp("GitLab"), 2),
				reg("issues", mcp("GitHub"), 3),
			},
			names:      map[string]int{"issues": 1},
			suppressed: []int{2},
			replaced:   []int{0},
			records: []resolve.Record{{Tool: "issues", Action: resolve.ActionPriorityResolved, Winner: "mcp:GitLab",
				Losers: []string{ghID}, TieBreak: resolve.TieBreakRegistrationOrder}},
		},
		{
			name:     "unknown strategy resolves as manual",
			cfg:      resolve.Config{Strategy: "bogus"},
			regs:     []resolve.Registration{reg("x", mcp("GitHub"), 1), reg("x", webSearch("brave"), 2)},
			names:    map[string]int{"x": 0},
			rejected: []int{1},
			records: []resolve.Record{{Tool: "x", Action: resolve.ActionManualRejected, Winner: ghID,
				Losers: []string{braveID}}},
		},
		{
			name: "records ordered by tool",
			regs: []resolve.Registration{
				reg("zeta", mcp("GitHub"), 1), reg("zeta", firstParty(), 2),
				reg("alpha", mcp("GitHub"), 3), reg("alpha", firstParty(), 4),
			},
			names: map[string]int{"zeta": 1, "github.zeta": 0, "alpha": 3, "github.alpha": 2},
			records: []resolve.Record{
				{Tool: "alpha", Action: resolve.ActionAutoPrefixApplied, Winner: fpID, Losers: []string{ghID},
					RenamedTo: "github.alpha", NamespaceSource: "github"},
				{Tool: "zeta", Action: resolve.ActionAutoPrefixApplied, Winner: fpID, Losers: []string{ghID},
					RenamedTo: "github.zeta", NamespaceSource: "github"},
			},
		},
		{
			name:  "zero source is first-party",
			regs:  []resolve.Registration{reg("x", mcp("GitHub"), 1), reg("x", contracts.Source{}, 2)},
			names: map[string]int{"x": 1, "github.x": 0},
			records: []resolve.Record{{Tool: "x", Action: resolve.ActionAutoPrefixApplied, Winner: fpID,
				Losers: []string{ghID}, RenamedTo: "github.x", NamespaceSource: "github"}},
		},
		{
			name:  "kind-less source is not first-party",
			regs:  []resolve.Registration{reg("x", contracts.Source{ServerIdentity: "evil"}, 1), reg("x", webSearch("brave"), 2)},
			names: map[string]int{"x": 1, "unknown-811c9dc5.x": 0},
			records: []resolve.Record{{Tool: "x", Action: resolve.ActionAutoPrefixApplied, Winner: braveID,
				Losers: []string{"unknown:"}, RenamedTo: "unknown-811c9dc5.x", NamespaceSource: "unknown-811c9dc5"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve.Resolve(tt.regs, tt.cfg)
			if !reflect.DeepEqual(got.Names, tt.names) {
				t.Errorf("Names = %v, want %v", got.Names, tt.names)
			}
			if !slices.Equal(got.Rejected, tt.rejected) {
				t.Errorf("Rejected = %v, want %v", got.Rejected, tt.rejected)
			}
			if !slices.Equal(got.Suppressed, tt.suppressed) {
				t.Errorf("Suppressed = %v, want %v", got.Suppressed, tt.suppressed)
			}
			if !slices.Equal(got.Replaced, tt.replaced) {
				t.Errorf("Replaced = %v, want %v", got.Replaced, tt.replaced)
			}
			if !reflect.DeepEqual(got.Records, tt.records) {
				t.Errorf("Records =\n%s\nwant\n%s", formatRecords(got.Records), formatRecords(tt.records))
			}
			checkOutcome(t, tt.regs, got)
		})
	}
}

func formatRecords(rs []resolve.Record) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %+v\n", r)
	}
	return b.String()
}

// checkOutcome checks what holds for every outcome: each index is
// accounted for exactly once, every name is valid, and a name is either the
// declared one or its rename.
func checkOutcome(t *testing.T, regs []resolve.Registration, o resolve.Outcome) {
	t.Helper()
	seen := make([]int, len(regs))
	for name, i := range o.Names {
		if i < 0 || i >= len(regs) {
			t.Fatalf("Names[%q] = %d, out of range", name, i)
		}
		seen[i]++
		if err := contracts.ValidateToolName(name); err != nil {
			t.Errorf("resolved name %q is invalid: %v", name, err)
		}
		if name != regs[i].Name && name != resolve.Rename(regs[i].Name, regs[i].Source) {
			t.Errorf("Names[%q] = %d, declared as %q: neither the name nor its rename", name, i, regs[i].Name)
		}
	}
	for _, list := range [][]int{o.Rejected, o.Suppressed, o.Replaced} {
		for _, i := range list {
			if i < 0 || i >= len(regs) {
				t.Fatalf("index %d out of range", i)
			}
			seen[i]++
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Errorf("registration %d (%q from %s) is accounted for %d times, want once",
				i, regs[i].Name, resolve.SourceID(regs[i].Source), c)
		}
	}
}

// canonical rewrites an outcome in terms of the registrations' Seq, which
// the order of the input slice does not change.
type canonical struct {
	Names                          map[string]uint64
	Rejected, Suppressed, Replaced []uint64
	Records                        []resolve.Record
}

func canon(regs []resolve.Registration, o resolve.Outcome) canonical {
	seqs := func(idx []int) []uint64 {
		var out []uint64
		for _, i := range idx {
			out = append(out, regs[i].Seq)
		}
		return out
	}
	c := canonical{Names: make(map[string]uint64), Rejected: seqs(o.Rejected), Suppressed: seqs(o.Suppressed),
		Replaced: seqs(o.Replaced), Records: o.Records}
	for name, i := range o.Names {
		c.Names[name] = regs[i].Seq
	}
	return c
}

func TestResolveIgnoresInputOrder(t *testing.T) {
	regs := []resolve.Registration{
		reg("search", mcp("GitHub"), 1),
		reg("search", firstParty(), 2),
		reg("search", skill("github", false), 3),
		reg("github.search", webSearch("brave"), 4),
		reg("fetch", webSearch("brave"), 5),
		reg("fetch", mcp("GitHub"), 6),
		reg("fetch", skill("scratch", false), 7),
		reg("fetch", skill("notes", true), 8),
		reg("fetch", mcp("GitHub"), 9), // replaces seq 6
		reg("issues", mcp("GitLab"), 10),
		reg("issues", mcp("GitHub"), 11),
		reg("run", builtIn("code"), 12),
		reg("run", firstParty(), 13),
		reg("run", mcp("日本"), 14),
		reg("lonely", mcp("GitHub"), 15),
		reg(strings.Repeat("l", 128), mcp("GitHub"), 16),
		reg(strings.Repeat("l", 128), skill("notes", true), 17),
	}
	configs := []resolve.Config{
		{},
		{Strategy: resolve.StrategyPriority, Priority: map[string]int{"mcp:GitLab": 5, "web-search:brave": 70}},
		{Strategy: resolve.StrategyManual},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cfg := range configs {
		t.Run(string(cfg.Strategy), func(t *testing.T) {
			first := resolve.Resolve(regs, cfg)
			checkOutcome(t, regs, first)
			want := canon(regs, first)
			for range 200 {
				shuffled := slices.Clone(regs)
				rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				got := resolve.Resolve(shuffled, cfg)
				checkOutcome(t, shuffled, got)
				if c := canon(shuffled, got); !reflect.DeepEqual(c, want) {
					t.Fatalf("shuffled input gave\n%+v\nwant\n%+v", c, want)
				}
			}
		})
	}
}

func TestResolveEqualSeqIsDeterministic(t *testing.T) {
	// Seq should be unique; when it is not, SourceID then Name order the
	// registrations, so the outcome still does not depend on the slice.
	a := []resolve.Registration{reg("x", mcp("b"), 1), reg("x", mcp("a"), 1)}
	b := []resolve.Registration{a[1], a[0]}
	ga, gb := resolve.Resolve(a, resolve.Config{}), resolve.Resolve(b, resolve.Config{})
	if a[ga.Names["x"]] != b[gb.Names["x"]] {
		t.Errorf("winner depends on slice order: %+v vs %+v", a[ga.Names["x"]], b[gb.Names["x"]])
	}
	if got := a[ga.Names["x"]].Source.ServerIdentity; got != "a" {
		t.Errorf("winner = mcp:%s, want mcp:a (SourceID order)", got)
	}
}

func TestResolveSaturatingBoost(t *testing.T) {
	cfg := resolve.Config{Strategy: resolve.StrategyPriority, Priority: map[string]int{
		"mcp:a": math.MaxInt, "mcp:b": math.MinInt,
	}}
	regs := []resolve.Registration{reg("x", mcp("b"), 1), reg("x", webSearch("w"), 2), reg("x", mcp("a"), 3)}
	got := resolve.Resolve(regs, cfg)
	if w := got.Names["x"]; w != 2 {
		t.Errorf("winner = %d, want 2 (mcp:a boosted to the top without wrapping)", w)
	}
	if !slices.Equal(got.Suppressed, []int{0, 1}) {
		t.Errorf("Suppressed = %v, want [0 1]", got.Suppressed)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, s := range []resolve.Strategy{"", resolve.StrategyAutoPrefix, resolve.StrategyPriority, resolve.StrategyManual} {
		if err := (resolve.Config{Strategy: s}).Validate(); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", s, err)
		}
	}
	if err := (resolve.Config{Strategy: "Priority"}).Validate(); err == nil {
		t.Error(`Validate("Priority") = nil, want an error`)
	}
}

func TestResolveEmpty(t *testing.T) {
	got := resolve.Resolve(nil, resolve.Config{})
	if got.Names == nil || len(got.Names) != 0 || got.Rejected != nil || got.Suppressed != nil || got.Replaced != nil || got.Records != nil {
		t.Errorf("Resolve(nil) = %+v, want an empty outcome with a non-nil Names", got)
	}
}
