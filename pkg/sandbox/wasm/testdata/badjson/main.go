// Command badjson writes text that is not JSON.
package main

import "fmt"

func main() {
	fmt.Println("this is {not JSON")
}
