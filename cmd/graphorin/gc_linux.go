package main

import (
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// memoryAvailable is the memory this process may use: the machine's, or
// its cgroup's limit when that is lower (0 when neither can be read).
func memoryAvailable() int64 {
	var total int64
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		total = int64(min(uint64(si.Totalram)*uint64(si.Unit), math.MaxInt64))
	}
	// cgroup v2 first, then v1; "max" (or a v1 "unlimited" value far above
	// the machine's memory) is no limit.
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
		break
	}
	return total
}
