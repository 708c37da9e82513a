// Command spin burns CPU until something stops it.
package main

var sink uint64

func main() {
	for i := uint64(0); ; i++ {
		sink += i * i
	}
}
