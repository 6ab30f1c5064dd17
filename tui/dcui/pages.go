package dcui

import (
	"log/slog"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/diagnostics"
	"github.com/virtcon/virtcon/tui/hardware"
	"github.com/virtcon/virtcon/tui/logs"
	"github.com/virtcon/virtcon/tui/network"
	tuipower "github.com/virtcon/virtcon/tui/power"
	"github.com/virtcon/virtcon/tui/vms"
	"github.com/virtcon/virtcon/vm"
)

// livePages builds the screens after login over the real core, in tab
// order. root is the --root flag, passed on to `virt vm console`.
func livePages(c common.Common, layout paths.Layout, log *slog.Logger, root string) []app.Page {
	const hostRoot = "/"
	mgr := vm.NewManager(vm.Options{Layout: layout, Logger: log, HostRoot: hostRoot})
	k := c.Keys
	return []app.Page{
		{Key: k.VMs, Tab: "VMs", Screen: vms.New(c, mgr, vms.Options{VirtPath: vms.FindVirt(), Root: root})},
		{Key: k.Network, Tab: "Network", Screen: network.New(c, network.LiveSources(layout, log), network.Options{DesiredFile: netcfg.DesiredFile(layout)})},
		{Key: k.Hardware, Tab: "Hardware", Screen: hardware.New(c, hardware.LiveSources(layout, hostRoot, log))},
		{Key: k.Logs, Tab: "Logs", Screen: logs.New(c, logs.LiveSources(layout, mgr.List))},
		{Key: k.Diag, Tab: "Diag", Screen: diagnostics.New(c, diagnostics.LiveSources(layout, hostRoot, log))},
		{Key: k.Power, Tab: "Power", Screen: tuipower.New(c, tuipower.LiveSources(layout, hostRoot, log))},
	}
}
