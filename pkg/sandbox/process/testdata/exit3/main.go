// Command exit3 writes a complaint to stderr and exits with status 3.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println(`{"partial":true}`)
	fmt.Fprintln(os.Stderr, "exit3: the frobnicator is out of order")
	os.Exit(3)
}
