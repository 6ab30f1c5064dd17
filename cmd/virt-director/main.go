package main

import (
	"os"

	"github.com/virtcon/virtcon/directorcli"
)

func main() { os.Exit(directorcli.Main()) }
