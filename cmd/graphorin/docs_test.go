package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// citedIDs finds the behaviour ids a text cites: "REF-X3", ranges
// "REF-T1..T5" (every id between), and lists "REF-K4, K5".
var (
	citeRe  = regexp.MustCompile(`REF-([A-Z])([0-9]+)((?:\.\.[A-Z]?[0-9]+)|(?:,\s*[A-Z][0-9]+\b)*)`)
	rangeRe = regexp.MustCompile(`^\.\.([A-Z]?)([0-9]+)$`)
	listRe  = regexp.MustCompile(`([A-Z])([0-9]+)`)
)

func citedIDs(text string) map[string]bool {
	ids := map[string]bool{}
	for _, m := range citeRe.FindAllStringSubmatch(text, -1) {
		letter, first := m[1], m[2]
		ids[letter+first] = true
		if r := rangeRe.FindStringSubmatch(m[3]); r != nil {
			from, _ := strconv.Atoi(first)
			to, _ := strconv.Atoi(r[2])
			for n := from; n <= to; n++ {
				ids[letter+strconv.Itoa(n)] = true
			}
			continue
		}
		for _, l := range listRe.FindAllStringSubmatch(m[3], -1) {
			ids[l[1]+l[2]] = true
		}
	}
	return ids
}

// TestEveryCitedBehaviourIsDefined: the code cites behaviour ids (REF-X3,
// REF-T2, …) that were defined only in a document outside the repository.
// docs/behaviour.md defines them now, and every id cited anywhere in the
// repository must be defined there.
func TestEveryCitedBehaviourIsDefined(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse (the tests run in a git checkout): %v", err)
	}
	top := strings.TrimSpace(string(root))
	doc, err := os.ReadFile(filepath.Join(top, "docs", "behaviour.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^- \*\*([A-Z][0-9]+)\*\*`).FindAllStringSubmatch(string(doc), -1) {
		defined[m[1]] = true
	}
	if len(defined) < 60 {
		t.Fatalf("docs/behaviour.md defines %d ids; it should define the whole reference", len(defined))
	}
	files, err := exec.Command("git", "-C", top, "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for _, f := range strings.Fields(string(files)) {
		if !strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, ".md") && f != "nats.conf" && f != "compose.yaml" {
			continue
		}
		if f == "docs/behaviour.md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(top, f))
		if err != nil {
			continue // deleted in the working tree
		}
		for id := range citedIDs(string(b)) {
			cited++
			if !defined[id] {
				t.Errorf("%s cites REF-%s, which docs/behaviour.md does not define", f, id)
			}
		}
	}
	if cited < 100 {
		t.Fatalf("found %d citations; the scan is not reading the repository", cited)
	}
	// The parser itself.
	got := citedIDs("see REF-T1..T5 and REF-K4, K5; REF-X12.")
	for _, want := range []string{"T1", "T3", "T5", "K4", "K5", "X12"} {
		if !got[want] {
			t.Errorf("citedIDs misses %s in %v", want, got)
		}
	}
	if got["T6"] || got["X1"] {
		t.Errorf("citedIDs reads too much: %v", got)
	}
}

// TestComposeMatchesTheEmbeddedServer: compose.yaml pinned NATS 2.12 while
// the tests embed 2.15. The image must be the server version go.mod names,
// so that what compose runs is what the tests test.
func TestComposeMatchesTheEmbeddedServer(t *testing.T) {
	raw, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*image:\s*nats:([0-9.]+)(-alpine)?\s*$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("compose.yaml names no nats:<version> image")
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info")
	}
	var embedded string
	for _, d := range bi.Deps {
		if d.Path == "github.com/nats-io/nats-server/v2" {
			embedded = strings.TrimPrefix(d.Version, "v")
		}
	}
	if embedded == "" {
		t.Fatal("the test binary embeds no nats-server")
	}
	if string(m[1]) != embedded {
		t.Fatalf("compose.yaml runs NATS %s, the tests embed %s", m[1], embedded)
	}
	// Every graphorin service has a health check it can answer.
	for _, role := range []string{"registry", "dispatcher", "worker", "spill", "approver", "codemode"} {
		if !regexp.MustCompile(`"--user", "`+role+`"[^\n]*"--health-addr", "127.0.0.1:8081"`).Match(raw) &&
			!regexp.MustCompile(`(?s)"`+role+`".{0,400}"--health-addr", "127.0.0.1:8081"`).Match(raw) {
			t.Errorf("the %s service in compose.yaml serves no /healthz for its health check", role)
		}
	}
}
