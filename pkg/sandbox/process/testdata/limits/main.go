// Command limits writes its resource limits as JSON: for each resource
// the soft and hard values, -1 meaning unlimited.
package main

import (
	"encoding/json"
	"os"
	"syscall"
)

// rlimitNproc is RLIMIT_NPROC on x86 and arm, which package syscall
// does not name.
const rlimitNproc = 6

func main() {
	resources := map[string]int{
		"data": syscall.RLIMIT_DATA, "as": syscall.RLIMIT_AS, "cpu": syscall.RLIMIT_CPU,
		"nproc": rlimitNproc, "core": syscall.RLIMIT_CORE, "nofile": syscall.RLIMIT_NOFILE,
	}
	out := map[string][2]int64{}
	for name, res := range resources {
		var l syscall.Rlimit
		if err := syscall.Getrlimit(res, &l); err != nil {
			os.Exit(1)
		}
		out[name] = [2]int64{signed(l.Cur), signed(l.Max)}
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func signed(v uint64) int64 {
	if v == ^uint64(0) {
		return -1
	}
	return int64(v)
}
