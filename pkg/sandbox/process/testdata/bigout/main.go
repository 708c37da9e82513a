// Command bigout writes one JSON string of about N bytes (its first
// argument), or, with N = -1, never stops writing.
package main

import (
	"bufio"
	"os"
	"strconv"
)

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		os.Exit(1)
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	w.WriteByte('"')
	chunk := make([]byte, 4096)
	for i := range chunk {
		chunk[i] = 'a'
	}
	for written := 0; n < 0 || written < n; written += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			os.Exit(1)
		}
	}
	w.WriteString("\"\n")
	w.Flush()
}
