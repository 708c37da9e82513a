// Command recurse recurses without bound.
package main

import "fmt"

//go:noinline
func down(n int) int {
	var pad [16]byte
	pad[n%len(pad)] = byte(n)
	return down(n+1) + int(pad[0])
}

func main() {
	fmt.Println(down(0))
}
