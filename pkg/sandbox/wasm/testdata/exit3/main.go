// Command exit3 complains on stderr and exits with code 3.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "exit3: the widget is broken")
	os.Exit(3)
}
