package status

import (
	"context"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

// Addr is one management address (hostinfo.Assessor.Addresses).
type Addr = hostinfo.Addr

// Sources are the screen's collectors. Each is called from a tea.Cmd,
// never from Update, so a slow one (a hung QMP socket, a KVM probe) only
// delays its own part of the screen.
type Sources struct {
	// Host returns the inventory and the health report.
	Host func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error)
	// VMs lists the VMs (vm.Manager.List): rows and an error together
	// while a spec cannot be read (an UNREADABLE row).
	VMs func(ctx context.Context) ([]vm.Entry, error)
	// PendingTry returns the network change on trial, nil when none.
	PendingTry func() (*netcfg.Pending, error)
	// ResolveExpiredTry rolls back a change on trial whose deadline
	// passed with its watchdog gone (netcfg.ResolveExpiredTry); called
	// before PendingTry on each network load.
	ResolveExpiredTry func(ctx context.Context) (*netcfg.ResolvedTry, error)
	// Addresses lists the addresses of the up, non-loopback interfaces.
	Addresses func() ([]Addr, error)
	// WebTerminal returns the running web terminal's record (its URLs),
	// nil when none runs: webterm.Read, never a port that listens.
	WebTerminal func() (*webterm.Record, error)
	// Usage samples CPU and memory use (hostinfo.SampleUsage); called
	// every second for the load sparklines.
	Usage func() (hostinfo.Usage, error)
	// Boot returns the last `virt host boot`'s record (nil: it never
	// ran) and whether it ran in the boot the host is in; read with the
	// network.
	Boot func() (rec *host.BootRecord, thisBoot bool, err error)
	// Director reads the node agent's enrolment and session
	// (agent.ReadStatus: files only); read with the network.
	Director func() (*Director, error)
}

// LiveSources reads the host through its services: the checks answer the
// KVM probe from this boot's cache (it runs guest code, so a screen that
// refreshes must not pay for it each time).
func LiveSources(h *host.Host) Sources {
	layout := h.Layout
	return Sources{
		Host: func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
			return h.Info.Check(ctx, hostinfo.CheckRequest{})
		},
		VMs: h.VMs.List,
		// it only reads: the status screen's one change to the host is
		// ResolveExpiredTry's rollback
		PendingTry:        h.Net.PendingTry,
		ResolveExpiredTry: h.Net.ResolveExpiredTry,
		Addresses:         h.Info.Addresses,
		WebTerminal:       func() (*webterm.Record, error) { return webterm.Read(layout) },
		Usage:             h.Info.Usage,
		Boot:              h.LastBoot,
		Director: func() (*Director, error) {
			st, err := agent.ReadStatus(layout)
			if err != nil {
				return nil, err
			}
			return &Director{Enrolled: st.Enrolled, Line: st.Line(), Alert: st.Alert, Running: st.Running, State: st.State}, nil
		},
	}
}
