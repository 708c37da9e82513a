// Command bomb allocates memory, 16 MiB at a time and every page touched,
// until something stops it.
package main

var keep [][]byte

func main() {
	for {
		b := make([]byte, 16<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
}
