// Command cwd reports its working directory and what is in it, writes a
// file there, and tries to write the file named by its first argument,
// outside it.
package main

import (
	"encoding/json"
	"os"
)

type report struct {
	Cwd          string   `json:"cwd"`
	Entries      []string `json:"entries"`
	WroteInside  bool     `json:"wroteInside"`
	WroteOutside bool     `json:"wroteOutside"`
	OutsideError string   `json:"outsideError,omitempty"`
}

func main() {
	var r report
	r.Cwd, _ = os.Getwd()
	entries, err := os.ReadDir(".")
	if err != nil {
		os.Exit(1)
	}
	r.Entries = []string{}
	for _, e := range entries {
		r.Entries = append(r.Entries, e.Name())
	}
	r.WroteInside = os.WriteFile("scratch.txt", []byte("scratch"), 0o600) == nil
	if len(os.Args) > 1 {
		if err := os.WriteFile(os.Args[1], []byte("written from a process tool"), 0o600); err != nil {
			r.OutsideError = err.Error()
		} else {
			r.WroteOutside = true
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}
