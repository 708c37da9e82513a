package resolve

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Strategy is how a collision between sources is resolved (REF-R4).
type Strategy string

// The three strategies of REF-R4. The empty Strategy is StrategyAutoPrefix.
const (
	// StrategyAutoPrefix keeps the winner's name and renames every loser
	// to Rename(name, loser's source).
	StrategyAutoPrefix Strategy = "auto-prefix"
	// StrategyPriority keeps the winner and drops every loser.
	StrategyPriority Strategy = "priority"
	// StrategyManual keeps the winner and refuses every loser with the
	// error kind tool-collision.
	StrategyManual Strategy = "manual"
)

// Valid reports whether s is one of the three strategies or empty.
func (s Strategy) Valid() bool {
	switch s {
	case "", StrategyAutoPrefix, StrategyPriority, StrategyManual:
		return true
	}
	return false
}

// effective applies the default. An unknown strategy resolves as manual:
// it renames nothing and drops nothing silently, so a misconfiguration is
// seen (as tool-collision errors) instead of reshaping the catalogue.
// Config.Validate catches it earlier.
func (s Strategy) effective() Strategy {
	switch s {
	case "":
		return StrategyAutoPrefix
	case StrategyAutoPrefix, StrategyPriority, StrategyManual:
		return s
	}
	return StrategyManual
}

// Config is how Resolve breaks collisions. The zero value is auto-prefix
// without boosts.
type Config struct {
	Strategy Strategy
	// Priority boosts sources under StrategyPriority only: the value for a
	// SourceID is added to that source's Ladder value (REF-R4: "an explicit
	// ctx priority adds to the source it names"). Boosts cannot beat
	// first-party precedence, and other strategies ignore them.
	Priority map[string]int
}

// Validate reports an unknown strategy.
func (c Config) Validate() error {
	if !c.Strategy.Valid() {
		return fmt.Errorf("resolve: unknown collision strategy %q (want %s, %s or %s)",
			c.Strategy, StrategyAutoPrefix, StrategyPriority, StrategyManual)
	}
	return nil
}

// Registration is one tool as a source declared it.
type Registration struct {
	// Name is the name the tool was declared with. Resolve expects it to
	// pass contracts.ValidateToolName (REF-D1 is checked at declaration).
	Name   string
	Source contracts.Source
	// Seq is the registration order: lower registered first. It should be
	// unique per registration; see Resolve for what happens when it is not.
	Seq uint64
}

// Action is a REF-R6 resolution record kind; the audit row of a record is
// "tool:collision:<action>".
type Action string

// The five actions of REF-R6.
const (
	ActionPriorityResolved     Action = "priority-resolved"
	ActionAutoPrefixApplied    Action = "auto-prefix-applied"
	ActionManualRejected       Action = "manual-rejected"
	ActionFirstPartyPrecedence Action = "first-party-precedence"
	ActionSuppressed           Action = "suppressed"
)

// TieBreak values of a priority-resolved record.
const (
	// TieBreakExplicitPriority: a non-zero Config.Priority boost applied
	// to at least one source of the group.
	TieBreakExplicitPriority = "explicit-priority"
	// TieBreakRegistrationOrder: the ladder decided, ties by Seq.
	TieBreakRegistrationOrder = "registration-order"
)

// Record is one resolution of a contested name (REF-R6).
type Record struct {
	// Tool is the contested (declared) name.
	Tool   string
	Action Action
	// Winner is the SourceID of the registration that kept Tool.
	Winner string
	// Losers are the SourceIDs the record is about, in registration order:
	// every loser of the group for priority-resolved, manual-rejected and
	// first-party-precedence; the one renamed or suppressed loser for
	// auto-prefix-applied and suppressed.
	Losers []string
	// RenamedTo is the loser's new name (auto-prefix-applied), or the
	// candidate that was already taken (suppressed).
	RenamedTo string
	// NamespaceSource is the namespace of that rename (Namespace(loser)).
	NamespaceSource string
	// TieBreak is set on priority-resolved records only.
	TieBreak string
}

// Outcome is the resolved catalogue. Indexes refer to the slice given to
// Resolve; every index is in exactly one of Names (as a value), Rejected,
// Suppressed or Replaced.
type Outcome struct {
	// Names maps each resolved name to the registration that holds it.
	Names map[string]int
	// Rejected are the registrations refused under StrategyManual; their
	// registrant gets the error kind tool-collision.
	Rejected []int
	// Suppressed are the registrations dropped: priority losers, and
	// auto-prefix losers whose new name was taken.
	Suppressed []int
	// Replaced are the registrations superseded by a later one of the same
	// source and declared name (REF-R2); the caller counts them
	// (tool.registry.same-source-replaced.total). They get no record.
	Replaced []int
	// Records are ordered by Tool, then as described on Resolve.
	Records []Record
}

// Resolve resolves every collision between the registrations' declared
// names under cfg (REF-R2..R6). It does no I/O and never fails: a caller
// wanting to refuse an unknown strategy calls cfg.Validate first.
//
// The rules, in order:
//
//  1. Registrations with the same SourceID and Name are one source
//     re-registering: the one with the highest Seq stays, the others are
//     Replaced.
//  2. The rest are grouped by Name. A group of one keeps its name, with no
//     record.
//  3. A group's winner is its first-party or built-in registration (the
//     lowest Seq if several); without one, the highest Ladder value (plus
//     the Config.Priority boost under StrategyPriority), ties by lowest
//     Seq. The winner keeps the name under every strategy.
//  4. auto-prefix: each loser, in ascending Seq across all groups, is
//     renamed to Rename(Name, Source) with an auto-prefix-applied record,
//     unless that name is already taken, by any declared name (each keeps
//     a winner) or by an earlier rename; then it is Suppressed with a
//     suppressed record.
//     priority: the losers are Suppressed; one record per group,
//     first-party-precedence if a first-party or built-in won, else
//     priority-resolved.
//     manual: the losers are Rejected; one manual-rejected record per
//     group, preceded by a first-party-precedence record if a first-party
//     or built-in won.
//
// The outcome depends on the set of registrations, not on the order of the
// slice: the input is processed in ascending Seq. Registrations sharing a
// Seq are ordered by SourceID, then Name; only registrations equal in all
// three are told apart by their index. Rejected, Suppressed, Replaced and
// each record's Losers are in processing order.
func Resolve(regs []Registration, cfg Config) Outcome {
	strategy := cfg.Strategy.effective()
	n := len(regs)
	ids := make([]string, n)
	for i := range regs {
		ids[i] = SourceID(regs[i].Source)
	}

	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(
			cmp.Compare(regs[a].Seq, regs[b].Seq),
			strings.Compare(ids[a], ids[b]),
			strings.Compare(regs[a].Name, regs[b].Name),
			cmp.Compare(a, b),
		)
	})
	rank := make([]int, n)
	for r, i := range order {
		rank[i] = r
	}
	byRank := func(a, b int) int { return cmp.Compare(rank[a], rank[b]) }

	out := Outcome{Names: make(map[string]int)}

	// Rule 1: the same source re-registering; the last in order stays.
	type sourceName struct{ id, name string }
	latest := make(map[sourceName]int, n)
	for _, i := range order {
		latest[sourceName{ids[i], regs[i].Name}] = i
	}
	groups := make(map[string][]int)
	var declared []string
	for _, i := range order {
		if latest[sourceName{ids[i], regs[i].Name}] != i {
			out.Replaced = append(out.Replaced, i)
			continue
		}
		name := regs[i].Name
		if _, ok := groups[name]; !ok {
			declared = append(declared, name)
		}
		groups[name] = append(groups[name], i) // in ascending rank
	}
	slices.Sort(declared)

	value := func(i int) int {
		v := Ladder(regs[i].Source)
		if strategy == StrategyPriority {
			v = addSaturating(v, cfg.Priority[ids[i]])
		}
		return v
	}

	type loser struct{ reg, winner int }
	var renames []loser
	for _, name := range declared {
		group := groups[name]
		winner, precedence := pickWinner(regs, group, value)
		out.Names[name] = winner
		if len(group) == 1 {
			continue
		}
		var losers []int
		for _, i := range group {
			if i != winner {
				losers = append(losers, i)
			}
		}
		rec := Record{Tool: name, Winner: ids[winner], Losers: sourceIDs(ids, losers)}
		switch strategy {
		case StrategyAutoPrefix:
			for _, i := range losers {
				renames = append(renames, loser{i, winner})
			}
		case StrategyPriority:
			out.Suppressed = append(out.Suppressed, losers...)
			if precedence {
				rec.Action = ActionFirstPartyPrecedence
			} else {
				rec.Action = ActionPriorityResolved
				rec.TieBreak = TieBreakRegistrationOrder
				for _, i := range group {
					if cfg.Priority[ids[i]] != 0 {
						rec.TieBreak = TieBreakExplicitPriority
						break
					}
				}
			}
			out.Records = append(out.Records, rec)
		case StrategyManual:
			out.Rejected = append(out.Rejected, losers...)
			if precedence {
				fp := rec
				fp.Action = ActionFirstPartyPrecedence
				fp.Losers = slices.Clone(rec.Losers)
				out.Records = append(out.Records, fp)
			}
			rec.Action = ActionManualRejected
			out.Records = append(out.Records, rec)
		}
	}

	// Rule 4, auto-prefix: rename in ascending Seq of the loser, so that
	// when two renames want one name the earlier registration gets it.
	slices.SortFunc(renames, func(a, b loser) int { return byRank(a.reg, b.reg) })
	for _, l := range renames {
		reg := regs[l.reg]
		to := Rename(reg.Name, reg.Source)
		rec := Record{
			Tool:            reg.Name,
			Action:          ActionAutoPrefixApplied,
			Winner:          ids[l.winner],
			Losers:          []string{ids[l.reg]},
			RenamedTo:       to,
			NamespaceSource: Namespace(reg.Source),
		}
		// Names already holds every declared name (each kept a winner) and
		// every earlier rename.
		if _, taken := out.Names[to]; taken {
			rec.Action = ActionSuppressed
			out.Suppressed = append(out.Suppressed, l.reg)
		} else {
			out.Names[to] = l.reg
		}
		out.Records = append(out.Records, rec)
	}

	// Stable: keeps loser order within a tool, and first-party-precedence
	// before manual-rejected.
	slices.SortStableFunc(out.Records, func(a, b Record) int { return strings.Compare(a.Tool, b.Tool) })
	slices.SortFunc(out.Rejected, byRank)
	slices.SortFunc(out.Suppressed, byRank)
	return out
}

// pickWinner returns the winner of a group given in ascending Seq, and
// whether it won by first-party precedence.
func pickWinner(regs []Registration, group []int, value func(int) int) (winner int, precedence bool) {
	for _, i := range group {
		if firstPartyLike(regs[i].Source) {
			return i, true
		}
	}
	winner, best := group[0], value(group[0])
	for _, i := range group[1:] {
		if v := value(i); v > best { // strictly: a tie stays with the earlier
			winner, best = i, v
		}
	}
	return winner, false
}

func sourceIDs(ids []string, regs []int) []string {
	out := make([]string, len(regs))
	for k, i := range regs {
		out[k] = ids[i]
	}
	return out
}

// addSaturating adds without wrapping, so an absurd boost cannot overflow
// into the bottom of the ladder.
func addSaturating(a, b int) int {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt
	case b < 0 && s > a:
		return math.MinInt
	}
	return s
}
