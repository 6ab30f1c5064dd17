package main

import (
	"context"
	"os"

	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/tui/dcui"
)

func main() {
	// the DCUI re-executes itself for the KVM probe, a network try's
	// watchdog, the DHCP client and PAM transactions (the packages that
	// start them register them): those must never start a TUI
	reexec.Init()
	os.Exit(dcui.Main(context.Background()))
}
