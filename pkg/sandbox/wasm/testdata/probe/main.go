// Command probe tries what a sandboxed tool must not be able to do (read a
// file, read the environment, dial the network, list the root directory)
// and reports each outcome, plus what it sees of the clocks, the random
// source and its arguments. Input: {"addr": "host:port", "env": "NAME"}.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"time"
)

type attempt struct {
	OK   bool   `json:"ok"`
	Err  string `json:"err,omitempty"`
	Seen string `json:"seen,omitempty"`
}

func try(seen string, err error) attempt {
	if err != nil {
		return attempt{Err: err.Error()}
	}
	return attempt{OK: true, Seen: seen}
}

func main() {
	var in struct {
		Addr string `json:"addr"`
		Env  string `json:"env"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		os.Exit(1)
	}
	out := map[string]any{}

	out["open"] = try(func() (string, error) {
		b, err := os.ReadFile("/etc/passwd")
		return string(b), err
	}())
	out["readdir"] = try(func() (string, error) {
		ents, err := os.ReadDir("/")
		if err != nil {
			return "", err
		}
		names := ""
		for _, e := range ents {
			names += e.Name() + " "
		}
		return names, nil
	}())
	out["dial"] = try(func() (string, error) {
		c, err := net.DialTimeout("tcp", in.Addr, time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.RemoteAddr().String(), nil
	}())
	v, found := os.LookupEnv(in.Env)
	if found {
		out["env"] = attempt{OK: true, Seen: v}
	} else {
		out["env"] = attempt{Err: "not set"}
	}
	out["environ"] = os.Environ()
	out["args"] = os.Args

	// Clocks and randomness: the host must give real ones.
	out["now_unix_ms"] = time.Now().UnixMilli()
	t0 := time.Now()
	time.Sleep(20 * time.Millisecond)
	out["slept_ns"] = time.Since(t0).Nanoseconds()
	r := make([]byte, 16)
	_, _ = rand.Read(r)
	out["rand"] = hex.EncodeToString(r)

	_ = json.NewEncoder(os.Stdout).Encode(out)
}
