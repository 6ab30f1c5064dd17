package dcui

import (
	"log/slog"
	"time"

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

// pageDeps are what the screens after login read and change: the core in
// production (livePages), fakes in the full-screen tests, so both build
// the pages through the same buildPages.
type pageDeps struct {
	vms         vms.Manager
	vmOpts      vms.Options
	network     network.Sources
	netOpts     network.Options
	hardware    hardware.Sources
	logs        logs.Sources
	diagnostics diagnostics.Sources
	power       tuipower.Sources
}

// livePages builds the screens after login over the real core, in tab
// order. idle is the idle timeout (a VM console detaches after it too); fg
// lets the signal handler end a console that has the terminal.
func livePages(c common.Common, layout paths.Layout, log *slog.Logger, idle time.Duration, fg *common.Foreground, activity func()) []app.Page {
	const hostRoot = "/"
	mgr := vm.NewManager(vm.Options{Layout: layout, Logger: log, HostRoot: hostRoot})
	return buildPages(c, pageDeps{
		vms:         mgr,
		vmOpts:      vms.Options{IdleTimeout: idle, Foreground: fg, Activity: activity},
		network:     network.LiveSources(layout, log),
		netOpts:     network.Options{DesiredFile: netcfg.DesiredFile(layout)},
		hardware:    hardware.LiveSources(layout, hostRoot, log),
		logs:        logs.LiveSources(layout, mgr.List),
		diagnostics: diagnostics.LiveSources(layout, hostRoot, log),
		power:       tuipower.LiveSources(layout, hostRoot, log),
	})
}

// buildPages builds the screens after login over d, in tab order, each
// with its global key.
func buildPages(c common.Common, d pageDeps) []app.Page {
	k := c.Keys
	return []app.Page{
		{Key: k.VMs, Tab: "VMs", Screen: vms.New(c, d.vms, d.vmOpts)},
		{Key: k.Network, Tab: "Network", Screen: network.New(c, d.network, d.netOpts)},
		{Key: k.Hardware, Tab: "Hardware", Screen: hardware.New(c, d.hardware)},
		{Key: k.Logs, Tab: "Logs", Screen: logs.New(c, d.logs)},
		{Key: k.Diag, Tab: "Diag", Screen: diagnostics.New(c, d.diagnostics)},
		{Key: k.Power, Tab: "Power", Screen: tuipower.New(c, d.power)},
	}
}
