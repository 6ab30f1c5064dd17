package netcfg

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TakeSnapshot records the named links of the current network namespace
// and the main-table routes through them.
func TakeSnapshot(ctx context.Context, links []string) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	s := &Snapshot{Taken: time.Now().UTC()}
	byIndex := map[int]string{}
	seen := map[string]bool{}
	for _, name := range links {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		ls := LinkSnapshot{Name: name}
		l, err := netlink.LinkByName(name)
		switch {
		case snapNotFound(err):
			s.Links = append(s.Links, ls)
			continue
		case err != nil:
			return nil, fmt.Errorf("snapshot: link %q: %w", name, err)
		}
		if err := snapLink(&ls, l); err != nil {
			return nil, fmt.Errorf("snapshot: link %q: %w", name, err)
		}
		byIndex[l.Attrs().Index] = name
		s.Links = append(s.Links, ls)
	}
	routes, err := snapRetry(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: routes: %w", err)
	}
	for _, r := range routes {
		name, ok := byIndex[r.LinkIndex]
		if !ok || !snapRouteKept(r) {
			continue
		}
		s.Routes = append(s.Routes, snapRoute(r, name))
	}
	return s, nil
}

func snapLink(ls *LinkSnapshot, l netlink.Link) error {
	a := l.Attrs()
	ls.Exists = true
	ls.Kind = l.Type()
	ls.MTU = a.MTU
	ls.Up = a.Flags&net.FlagUp != 0
	if len(a.HardwareAddr) > 0 {
		ls.MAC = a.HardwareAddr.String()
	}
	if a.MasterIndex != 0 {
		m, err := netlink.LinkByIndex(a.MasterIndex)
		if err != nil {
			return fmt.Errorf("master %d: %w", a.MasterIndex, err)
		}
		ls.Master = m.Attrs().Name
	}
	switch v := l.(type) {
	case *netlink.Vlan:
		p, err := netlink.LinkByIndex(a.ParentIndex)
		if err != nil {
			return fmt.Errorf("vlan parent %d: %w", a.ParentIndex, err)
		}
		ls.VLAN = &VLANSnapshot{Parent: p.Attrs().Name, ID: v.VlanId}
		if v.VlanProtocol == netlink.VLAN_PROTOCOL_8021AD {
			ls.VLAN.Protocol = "802.1ad"
		}
	case *netlink.Bridge:
		bi, err := readBridgeAttrs(nil, a.Index)
		if err != nil {
			return err
		}
		ls.Bridge = &BridgeSnapshot{STP: bi.stp, ForwardDelayMS: bi.forwardDelay.Milliseconds(), VLANFiltering: bi.vlanFiltering}
	}
	addrs, err := snapRetry(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("addresses: %w", err)
	}
	for _, ad := range addrs {
		if !snapAddrKept(ad) {
			continue
		}
		as := AddrSnapshot{CIDR: ad.IPNet.String(), Flags: ad.Flags &^ restoreKernelAddrFlags}
		if ad.Flags&unix.IFA_F_PERMANENT == 0 && uint32(ad.ValidLft) != 0xffffffff {
			as.ValidLft, as.PreferredLft = ad.ValidLft, ad.PreferedLft
		}
		ls.Addresses = append(ls.Addresses, as)
	}
	return nil
}

// snapAddrKept leaves out what the kernel manages itself: IPv6 link-local
// addresses (made from the MAC when the link comes up).
func snapAddrKept(a netlink.Addr) bool {
	return a.IPNet != nil && !(a.IP.To4() == nil && a.IP.IsLinkLocalUnicast())
}

// snapRouteKept keeps the unicast, single-path routes that a person or a
// daemon added; proto kernel routes follow the addresses.
func snapRouteKept(r netlink.Route) bool {
	return r.Protocol != unix.RTPROT_KERNEL && (r.Type == unix.RTN_UNICAST || r.Type == 0) &&
		len(r.MultiPath) == 0 && r.Table == unix.RT_TABLE_MAIN
}

func snapRoute(r netlink.Route, link string) RouteSnapshot {
	rs := RouteSnapshot{
		Link:     link,
		Family:   "ipv4",
		Dst:      "default",
		Metric:   r.Priority,
		Protocol: int(r.Protocol),
		Scope:    int(r.Scope),
		Flags:    r.Flags,
	}
	if r.Family == unix.AF_INET6 {
		rs.Family = "ipv6"
	}
	if r.Dst != nil {
		if ones, _ := r.Dst.Mask.Size(); ones != 0 {
			rs.Dst = r.Dst.String()
		}
	}
	if r.Gw != nil {
		rs.Gateway = r.Gw.String()
	}
	if r.Src != nil {
		rs.Src = r.Src.String()
	}
	return rs
}
