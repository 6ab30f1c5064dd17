// Command dcui is the virtcon console UI: the status screen, PAM login and
// the screens that manage the host. See docs/dcui.md.
//
// Exit codes: 0 quit, 1 error, 2 bad flags.
package main

import (
	"os"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/dcui"
)

func main() {
	// virtcon re-executes its own binary for the KVM probe, the network
	// try watchdog, the DHCP client and PAM transactions; those modes must
	// never start a TUI
	auth.MaybeRunPAMHelper()
	kvmprobe.MaybeRunChild()
	netcfg.MaybeRunWatchdog()
	netcfg.MaybeRunDHCPClient()
	os.Exit(dcui.Main())
}
