// Command virt is the virtcon command line.
package main

import (
	"os"

	"github.com/virtcon/virtcon/cli"
)

func main() { os.Exit(cli.Main()) }
