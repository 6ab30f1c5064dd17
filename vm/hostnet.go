package vm

import (
	"context"
	"strings"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
)

// hostNet gives VM NICs their TAPs through netcfg, in the caller's netns.
type hostNet struct{ layout paths.Layout }

func defaultHostNet(l paths.Layout) HostNet { return hostNet{layout: l} }

func (hostNet) TAPName(uid string, index int) string { return netcfg.TAPName(uid, index) }

func (hostNet) CreateTAP(ctx context.Context, name, bridge string, mtu int) error {
	return netcfg.CreateTAP(ctx, name, bridge, mtu)
}

func (hostNet) DeleteTAP(ctx context.Context, name string) error { return netcfg.DeleteTAP(ctx, name) }

// BridgeFor resolves a network of the applied host configuration.
func (h hostNet) BridgeFor(network string) (string, error) {
	cfg, err := netcfg.LoadApplied(h.layout)
	if err != nil {
		return "", err
	}
	if cfg != nil {
		for _, n := range cfg.Networks {
			if n.Name == network {
				return n.Bridge, nil
			}
		}
	}
	return "", &UnknownNetworkError{Network: network}
}

func (hostNet) ListTAPs(ctx context.Context) ([]string, error) { return netcfg.ListTAPs(ctx) }

func (h hostNet) Addresses(ctx context.Context, mac string) ([]string, string, error) {
	if cfg, err := netcfg.LoadApplied(h.layout); err == nil && cfg != nil {
		var out []string
		for _, n := range cfg.Networks {
			leases, _ := netcfg.NATLeases(h.layout, n.Name)
			for _, l := range leases {
				if strings.EqualFold(l.MAC, mac) {
					out = append(out, l.IP.String())
				}
			}
		}
		if len(out) > 0 {
			return out, "dhcp-lease", nil
		}
	}
	addrs, err := netcfg.NeighbourAddrs(ctx, mac)
	if err != nil {
		return nil, "", err
	}
	var out []string
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out, "neighbour", nil
}
