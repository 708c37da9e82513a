// Command sleep reads {"ms": n}, sleeps n milliseconds and reports when it
// started and ended by the wall clock, so a test can count overlapping runs.
package main

import (
	"encoding/json"
	"os"
	"time"
)

func main() {
	var in struct {
		MS int `json:"ms"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		os.Exit(1)
	}
	// After the input: an instance may have been started ahead, and what
	// it did before its first read of stdin happened before the call.
	start := time.Now()
	time.Sleep(time.Duration(in.MS) * time.Millisecond)
	_ = json.NewEncoder(os.Stdout).Encode(map[string]int64{
		"start_ns": start.UnixNano(),
		"end_ns":   time.Now().UnixNano(),
	})
}
