package resolve_test

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/services/registry/internal/resolve"
)

// Small pools, so that random input collides often.
var (
	fuzzIdentities = []string{
		"GitHub", "github", "GitHub Enterprise!!", "a b", "a-b", "日本", "!!!", "",
		strings.Repeat("x", 40), "abcdefghijklmnopqrstuvw xyz", "\u212Aube", "kube",
	}
	fuzzNames = []string{
		"search", "fetch", "github.search", "a-b.search", "kube.search", "mcp-9f26ee51.search",
		"x", "x.y", "github.x.y", strings.Repeat("a", 128), strings.Repeat("a", 121),
		strings.Repeat("b", 111) + "." + strings.Repeat("c", 16),
		"github." + strings.Repeat("a", 112) + "-" + "00000000",
	}
	fuzzBoosts = []int{0, 1, -1, 20, 40, -60, 1000, math.MaxInt, math.MinInt}
)

// fuzzSource turns two bytes into a source; kinds past the five are the
// zero Source and an unknown kind.
func fuzzSource(kind, id byte) contracts.Source {
	ident := fuzzIdentities[int(id)%len(fuzzIdentities)]
	switch kind % 8 {
	case 0:
		return firstParty()
	case 1:
		return builtIn(ident)
	case 2:
		return skill(ident, true)
	case 3:
		return skill(ident, false)
	case 4:
		return mcp(ident)
	case 5:
		return webSearch(ident)
	case 6:
		return contracts.Source{}
	default:
		return contracts.Source{Kind: contracts.SourceKind(ident)}
	}
}

// decodeFuzz reads a strategy, up to 4 boosts and up to 64 registrations.
// Seqs are unique: the low byte is the index.
func decodeFuzz(data []byte) ([]resolve.Registration, resolve.Config) {
	next := func() (byte, bool) {
		if len(data) == 0 {
			return 0, false
		}
		b := data[0]
		data = data[1:]
		return b, true
	}
	var cfg resolve.Config
	if b, ok := next(); ok {
		cfg.Strategy = []resolve.Strategy{"", resolve.StrategyAutoPrefix, resolve.StrategyPriority,
			resolve.StrategyManual, "bogus"}[int(b)%5]
	}
	if b, ok := next(); ok {
		for range int(b) % 5 {
			k, _ := next()
			i, _ := next()
			v, _ := next()
			if cfg.Priority == nil {
				cfg.Priority = make(map[string]int)
			}
			cfg.Priority[resolve.SourceID(fuzzSource(k, i))] = fuzzBoosts[int(v)%len(fuzzBoosts)]
		}
	}
	var regs []resolve.Registration
	for len(regs) < 64 {
		kind, ok := next()
		if !ok {
			break
		}
		id, _ := next()
		name, _ := next()
		order, _ := next()
		regs = append(regs, resolve.Registration{
			Name:   fuzzNames[int(name)%len(fuzzNames)],
			Source: fuzzSource(kind, id),
			Seq:    uint64(order)<<8 | uint64(len(regs)),
		})
	}
	return regs, cfg
}

func FuzzResolve(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 4, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{2, 1, 4, 0, 5, 4, 0, 0, 0, 2, 1, 0, 2, 5, 3, 0, 3, 4, 4, 0, 4, 4, 5, 0, 5})
	f.Add([]byte{3, 0, 0, 0, 0, 9, 4, 0, 9, 8, 1, 1, 9, 7, 7, 3, 9, 6})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 4, 0, 0, 1, 4, 1, 0, 2, 3, 1, 0, 3, 4, 5, 0, 4, 4, 6, 0, 5, 4, 2, 0, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		regs, cfg := decodeFuzz(data)
		got := resolve.Resolve(regs, cfg)
		checkOutcome(t, regs, got)

		strategy := cfg.Strategy
		if strategy == "" {
			strategy = resolve.StrategyAutoPrefix
		}
		if strategy == resolve.StrategyAutoPrefix && len(got.Rejected) != 0 {
			t.Errorf("auto-prefix rejected %v", got.Rejected)
		}
		// Every declared name keeps a winner, under every strategy.
		for _, r := range regs {
			if _, ok := got.Names[r.Name]; !ok {
				t.Errorf("declared name %q has no winner", r.Name)
			}
		}
		for _, rec := range got.Records {
			if rec.Winner == "" || len(rec.Losers) == 0 {
				t.Errorf("record %+v lacks a winner or losers", rec)
			}
		}

		// The reversed input gives the same outcome.
		rev := slices.Clone(regs)
		slices.Reverse(rev)
		if a, b := canon(regs, got), canon(rev, resolve.Resolve(rev, cfg)); !reflect.DeepEqual(a, b) {
			t.Errorf("reversed input gave\n%+v\nwant\n%+v", b, a)
		}
	})
}
