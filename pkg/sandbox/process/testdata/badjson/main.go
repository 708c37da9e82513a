// Command badjson exits 0 after writing something that is not JSON.
package main

import "fmt"

func main() {
	fmt.Println(`{"unterminated": "object"`)
}
