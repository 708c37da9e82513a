package resolve_test

import (
	"fmt"
	"slices"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/services/registry/internal/resolve"
)

func ExampleResolve() {
	regs := []resolve.Registration{
		{Name: "search", Source: contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "GitHub Enterprise"}, Seq: 1},
		{Name: "search", Source: contracts.Source{Kind: contracts.SourceFirstParty}, Seq: 2},
		{Name: "search", Source: contracts.Source{Kind: contracts.SourceWebSearch, ProviderName: "Brave"}, Seq: 3},
	}
	out := resolve.Resolve(regs, resolve.Config{}) // auto-prefix

	names := make([]string, 0, len(out.Names))
	for name := range out.Names {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Printf("%-24s %s\n", name, resolve.SourceID(regs[out.Names[name]].Source))
	}
	for _, r := range out.Records {
		fmt.Println(r.Action, r.Losers, "->", r.RenamedTo)
	}
	// Output:
	// brave.search             web-search:Brave
	// github-enterprise.search mcp:GitHub Enterprise
	// search                   first-party
	// auto-prefix-applied [mcp:GitHub Enterprise] -> github-enterprise.search
	// auto-prefix-applied [web-search:Brave] -> brave.search
}

func ExampleRename() {
	fmt.Println(resolve.Rename("search", contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "GitHub Enterprise!!"}))
	fmt.Println(resolve.Rename("search", contracts.Source{Kind: contracts.SourceMCP, ServerIdentity: "日本"}))
	// Output:
	// github-enterprise.search
	// mcp-9f26ee51.search
}
