package status

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

// LiveSources reads the real host: state under layout, /proc and /sys
// under hostRoot.
func LiveSources(layout paths.Layout, hostRoot string, log *slog.Logger) Sources {
	mgr := vm.NewManager(vm.Options{Layout: layout, Logger: log, HostRoot: hostRoot})
	return Sources{
		Host: HostSource(layout, hostRoot, log),
		VMs:  mgr.List,
		PendingTry: func() (*netcfg.Pending, error) {
			p, err := netcfg.PendingTry(layout)
			if errors.Is(err, netcfg.ErrNoPendingTry) {
				return nil, nil
			}
			return p, err
		},
		ResolveExpiredTry: func(ctx context.Context) (*netcfg.ResolvedTry, error) {
			return netcfg.ResolveExpiredTry(ctx, log, layout)
		},
		Addresses:   InterfaceAddrs,
		WebTerminal: func() (*webterm.Record, error) { return webterm.Read(layout) },
		Usage:       func() (hostinfo.Usage, error) { return hostinfo.SampleUsage(hostRoot) },
	}
}

// HostSource collects the inventory under hostRoot and runs the checks,
// answering the KVM probe from this boot's cache (it runs guest code, so
// a screen that refreshes must not pay for it each time). The Hardware
// screen uses it too.
func HostSource(layout paths.Layout, hostRoot string, log *slog.Logger) func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
	return func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		opts := hostinfo.Options{Root: hostRoot, Logger: log}
		inv, err := hostinfo.Collect(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		probe := hostinfo.CachedProbe(opts, layout.AccelCacheFile(), nil)
		return inv, hostinfo.RunChecks(ctx, inv, hostinfo.CheckOptions{Options: opts, Probe: probe}), nil
	}
}

// InterfaceAddrs lists the addresses of the up, non-loopback interfaces.
func InterfaceAddrs() ([]Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok || ip.IsLoopback() {
				continue
			}
			ones, _ := ipn.Mask.Size()
			out = append(out, Addr{Iface: ifc.Name, Prefix: netip.PrefixFrom(ip.Unmap(), ones)})
		}
	}
	return out, nil
}
