// Command counter increments a global on every run and prints it. A fresh
// instance per call means it prints {"n":1} every time.
package main

import "fmt"

var n int

func main() {
	n++
	fmt.Printf("{\"n\":%d}\n", n)
}
