// Command virt-director runs the virtcon director and administers it
// (package directorcli).
package main

import (
	"os"

	"github.com/virtcon/virtcon/directorcli"
)

func main() { os.Exit(directorcli.Main()) }
