// Command dcui will be the virtcon console UI; until it lands it says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "dcui: the console UI is not built yet; use `virt host check` and `virt host info` meanwhile")
	os.Exit(1)
}
