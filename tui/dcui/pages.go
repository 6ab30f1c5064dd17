package dcui

import (
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/diagnostics"
	tuidirector "github.com/virtcon/virtcon/tui/director"
	"github.com/virtcon/virtcon/tui/hardware"
	"github.com/virtcon/virtcon/tui/logs"
	"github.com/virtcon/virtcon/tui/network"
	tuipower "github.com/virtcon/virtcon/tui/power"
	"github.com/virtcon/virtcon/tui/vms"
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
	director    tuidirector.Sources
}

// livePages builds the screens after login over the host's services, in
// tab order. idle is the idle timeout (a VM console detaches after it
// too); activity restarts the session's idle timer.
func livePages(c common.Common, h *host.Host, idle time.Duration, activity func()) []app.Page {
	return buildPages(c, pageDeps{
		vms:         h.VMs,
		vmOpts:      vms.Options{IdleTimeout: idle, Activity: activity},
		network:     h.Net,
		netOpts:     network.Options{DesiredFile: h.Net.DesiredFile()},
		hardware:    hardware.LiveSources(h.Info),
		logs:        logs.LiveSources(h.Layout, h.VMs),
		diagnostics: diagnostics.LiveSources(h.Diag),
		power:       tuipower.LiveSources(h),
		director:    tuidirector.LiveSources(h, c.Logger),
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
		{Key: k.Director, Tab: "Director", Screen: tuidirector.New(c, d.director)},
	}
}
