package status

import (
	"context"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/webterm"
)

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
	}
}
