// Package resolve decides which registration holds each tool name when
// several sources declare the same one (REF-R2..R6). It is pure: no I/O, no
// NATS, no clock. The registry service feeds it every current registration
// and writes the outcome to the catalogue; audit rows, counters and the
// resolution-duration histogram are the caller's.
//
// Resolve is a function of the set of registrations, not of their arrival:
// the same registrations give the same outcome in any order, so every
// registry replica computes the same catalogue from the same snapshot.
//
// # Who wins
//
// A first-party or built-in registration always wins its name (the earliest
// if several). Otherwise the top of the REF-R3 ladder wins (built-in and
// first-party 100, trusted skill 80, untrusted skill 60, MCP 40, web-search
// 20), ties by registration order (Seq). Under the priority strategy a
// Config.Priority boost adds to the ladder value of the source it names.
// The winner keeps the declared name under every strategy; the losers are
// renamed (auto-prefix, the default), dropped (priority) or refused
// (manual).
//
// # Why the whole set at once
//
// The reference resolves incrementally, as tools register, so who loses can
// depend on arrival order and on which tool happened to be there first. A
// catalogue shared by many hosts and registries over NATS has no single
// arrival order; resolving the whole set, ordered by Seq, makes the result
// reproducible. Renames run in ascending Seq across all names, and a rename
// whose name is taken, by any declared name or by an earlier rename, is
// suppressed rather than allowed to start a new collision.
//
// # Renames
//
// A loser is renamed to "<namespace>.<name>" (Namespace, Rename). Decisions
// beyond the letter of REF-R5:
//
//   - Lower-casing is Unicode simple case mapping (strings.ToLower), then
//     everything outside [a-z0-9] becomes "-": "GitHub Enterprise!!" is
//     "github-enterprise", and the Kelvin sign (U+212A) becomes "k".
//   - A "-" left at the end by the cut to 24 characters is trimmed too, so a
//     namespace never ends in "-".
//   - An empty namespace falls back to "<kind>-<FNV1a32 of the raw
//     identifying field>" ("mcp-9f26ee51" for "日本"); the reference hashes
//     its source description instead. First-party, which never loses, would
//     be "first-party-811c9dc5".
//   - A rename over 128 characters keeps 119 and appends "-" and the hash of
//     the full candidate. The result of a valid name is always a valid name.
//
// # Invalid input
//
// Resolve does not validate. Declared names are expected to pass
// contracts.ValidateToolName. The whole zero Source counts as first-party;
// a source of any other unknown kind sits below the ladder (value 0),
// never has first-party precedence and renames under the namespace
// "unknown-<hash>". An unknown strategy resolves as manual;
// Config.Validate reports it.
package resolve
