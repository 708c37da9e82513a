// Command loop never ends: only the caller's deadline stops it.
package main

var spins uint64

func main() {
	for {
		spins++
	}
}
