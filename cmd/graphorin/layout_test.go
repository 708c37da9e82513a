package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServicesDoNotImportEachOther keeps the rule of DESIGN.md: services
// talk over subjects and share only pkg/.
func TestServicesDoNotImportEachOther(t *testing.T) {
	const mod = "github.com/graphorin/graphorin-go/services/"
	out := goList(t, mod+"...")
	services := map[string]bool{}
	for _, p := range strings.Fields(out) {
		if rest, ok := strings.CutPrefix(p, mod); ok {
			services[serviceOf(rest)] = true
		}
	}
	if len(services) < 4 {
		t.Fatalf("found %d services, the listing is broken", len(services))
	}
	for svc := range services {
		for _, p := range strings.Fields(goList(t, mod+svc+"/...")) {
			rest, ok := strings.CutPrefix(p, mod)
			if !ok {
				continue
			}
			if other := serviceOf(rest); other != svc {
				t.Errorf("service %s depends on service %s (%s)", svc, other, p)
			}
		}
	}
}

func goList(t *testing.T, pattern string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", pattern)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, stderr.String())
	}
	return string(out)
}

// serviceOf returns the service of a path under services/, without the
// ".test" of a test binary or the "_test" of an external test package.
func serviceOf(rest string) string {
	name := strings.SplitN(rest, "/", 2)[0]
	name = strings.TrimSuffix(name, ".test")
	return strings.TrimSuffix(strings.TrimSuffix(name, "]"), "_test")
}
