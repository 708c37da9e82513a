package taint

import (
	"os"
	"testing"
	"time"
)

// TestMain gives the scanners of the tests that set no Budget one they do
// not reach: what a test of detection checks must not depend on how fast
// the machine scans at that moment (under -race on a loaded machine, a
// scan of thirty bytes once outlasted the 250 ms default). The tests of
// the budget set theirs.
func TestMain(m *testing.M) {
	unsetBudget = time.Hour
	os.Exit(m.Run())
}
