// Command env is a process tool that writes its environment as a JSON
// object.
package main

import (
	"encoding/json"
	"os"
	"strings"
)

func main() {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	_ = json.NewEncoder(os.Stdout).Encode(m)
}
