package main

import (
	"os"

	"github.com/virtcon/virtcon/cli"
	"github.com/virtcon/virtcon/internal/reexec"
)

func main() {
	// virt re-executes itself for the KVM probe, a network try's watchdog
	// and the DHCP client (the packages that start them register them):
	// those never run the CLI
	reexec.Init()
	os.Exit(cli.Main())
}
