package main

import (
	"os"

	"github.com/virtcon/virtcon/cli/directorcli"
)

func main() { os.Exit(directorcli.Main()) }
