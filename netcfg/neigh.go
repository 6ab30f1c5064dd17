package netcfg

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
)

// NeighbourAddrs returns the addresses the kernel's neighbour table (ARP
// and NDP) holds for a MAC, in the current network namespace.
func NeighbourAddrs(ctx context.Context, mac string) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	neighs, err := netlink.NeighList(0, 0)
	if err != nil {
		return nil, fmt.Errorf("neighbour table: %w", err)
	}
	var out []netip.Addr
	for _, n := range neighs {
		if n.HardwareAddr == nil || !strings.EqualFold(n.HardwareAddr.String(), mac) {
			continue
		}
		if n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0 {
			continue
		}
		if a, ok := netip.AddrFromSlice(n.IP); ok && !a.IsLinkLocalUnicast() {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}
