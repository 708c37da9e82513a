// Command bomb allocates memory, touching every page, until the runtime
// refuses to give it more.
package main

const chunk = 1 << 20

var keep [][]byte

func main() {
	for {
		b := make([]byte, chunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
}
