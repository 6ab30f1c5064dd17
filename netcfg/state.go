package netcfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// State is the live network of one network namespace, as netlink reports
// it: what Plan compares the configuration against.
type State struct {
	Links  []Link  `json:"links"`  // by index
	Routes []Route `json:"routes"` // main table, unicast only
}

// Link is one network interface.
type Link struct {
	Name  string `json:"name"`
	Type  string `json:"type"` // netlink kind: bridge, vlan, veth, dummy; device for a NIC
	Index int    `json:"index"`
	// Master is the bridge (or bond) this link is a port of.
	Master string `json:"master,omitempty"`
	MTU    int    `json:"mtu"`
	// Up is the administrative state (IFF_UP), what apply sets; carrier
	// and STP port states are not part of it.
	Up bool `json:"up"`
	// Bridges only.
	STP           bool `json:"stp,omitempty"`
	VLANFiltering bool `json:"vlanFiltering,omitempty"`
	// VLANs only.
	VLANID int    `json:"vlanId,omitempty"`
	Parent string `json:"parent,omitempty"`
	// Addresses are the IPv4 and IPv6 addresses, link-local ones left out
	// (the kernel makes those), sorted.
	Addresses []netip.Prefix `json:"addresses,omitempty"`
}

// Route is a unicast route of the main table.
type Route struct {
	Dst     netip.Prefix `json:"dst"` // 0.0.0.0/0 or ::/0 for a default route
	Gateway netip.Addr   `json:"gateway,omitzero"`
	Src     netip.Addr   `json:"src,omitzero"`
	// Link is the outgoing interface; empty for a multipath route, whose
	// interfaces are in Multipath.
	Link      string   `json:"link,omitempty"`
	Multipath []string `json:"multipath,omitempty"`
	Metric    int      `json:"metric,omitempty"`
	// Protocol is who added it (RTPROT_*: 2 kernel, 3 boot, 4 static,
	// 9 router advertisement, 16 dhcp).
	Protocol int  `json:"protocol"`
	Scope    int  `json:"scope,omitempty"`
	OnLink   bool `json:"onlink,omitempty"`
}

// IsDefault reports whether r is a default route.
func (r Route) IsDefault() bool { return r.Dst.IsValid() && r.Dst.Bits() == 0 }

func (r Route) String() string {
	var b strings.Builder
	if r.IsDefault() {
		b.WriteString("default")
	} else {
		b.WriteString(r.Dst.String())
	}
	if r.Gateway.IsValid() {
		b.WriteString(" via " + r.Gateway.String())
	}
	if r.Link != "" {
		b.WriteString(" dev " + r.Link)
	}
	if r.Metric != 0 {
		fmt.Fprintf(&b, " metric %d", r.Metric)
	}
	return b.String()
}

// Link returns the link called name, or nil.
func (s *State) Link(name string) *Link {
	if s == nil {
		return nil
	}
	for i := range s.Links {
		if s.Links[i].Name == name {
			return &s.Links[i]
		}
	}
	return nil
}

// DefaultRouteLinks lists the links that carry a default route (IPv4 or
// IPv6, a multipath one included), sorted.
func (s *State) DefaultRouteLinks() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, r := range s.Routes {
		if !r.IsDefault() {
			continue
		}
		if r.Link != "" {
			out = append(out, r.Link)
		}
		out = append(out, r.Multipath...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ReadState reads links, addresses and main-table routes by netlink in the
// network namespace of the calling thread (a caller that switched
// namespaces must hold runtime.LockOSThread).
func ReadState(ctx context.Context) (*State, error) {
	h, err := openHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return h.readState(ctx)
}

// handle is a netlink connection bound to one network namespace (the one
// current when it was opened): the library's handle plus a raw socket for
// the bridge attributes the library does not speak (STP).
type handle struct {
	*netlink.Handle
	raw *nl.SocketHandle
}

func openHandle() (*handle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return &handle{Handle: h, raw: &nl.SocketHandle{Socket: s}}, nil
}

func (h *handle) Close() {
	h.Handle.Close()
	h.raw.Close()
}

// retry repeats a dump that a concurrent change interrupted.
func retry[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range 5 {
		if v, err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return v, err
}

func (h *handle) readState(ctx context.Context) (*State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	links, err := retry(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("read links: %w", err)
	}
	addrs, err := retry(func() ([]netlink.Addr, error) { return h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("read addresses: %w", err)
	}
	routes, err := retry(func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	st := &State{Links: make([]Link, 0, len(links))}
	byIndex := make(map[int]int, len(links))
	for _, l := range links {
		a := l.Attrs()
		sl := Link{
			Name:   a.Name,
			Type:   l.Type(),
			Index:  a.Index,
			Master: names[a.MasterIndex],
			MTU:    a.MTU,
			Up:     a.Flags&net.FlagUp != 0,
		}
		switch l := l.(type) {
		case *netlink.Bridge:
			sl.VLANFiltering = l.VlanFiltering != nil && *l.VlanFiltering
			if sl.STP, err = h.bridgeSTP(a.Index); err != nil {
				return nil, fmt.Errorf("read bridge %q: %w", a.Name, err)
			}
		case *netlink.Vlan:
			sl.VLANID = l.VlanId
			sl.Parent = names[a.ParentIndex]
		}
		byIndex[a.Index] = len(st.Links)
		st.Links = append(st.Links, sl)
	}
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if !ok || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if i, ok := byIndex[a.LinkIndex]; ok {
			st.Links[i].Addresses = append(st.Links[i].Addresses, p)
		}
	}
	for i := range st.Links {
		slices.SortFunc(st.Links[i].Addresses, comparePrefix)
	}
	slices.SortFunc(st.Links, func(a, b Link) int { return a.Index - b.Index })
	for _, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			continue
		}
		sr := Route{
			Link:     names[r.LinkIndex],
			Metric:   r.Priority,
			Protocol: int(r.Protocol),
			Scope:    int(r.Scope),
			OnLink:   r.Flags&unix.RTNH_F_ONLINK != 0,
		}
		if r.Dst != nil {
			sr.Dst, _ = prefixOf(r.Dst)
		} else if r.Family == unix.AF_INET6 {
			sr.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		} else {
			sr.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		sr.Gateway = addrOf(r.Gw)
		sr.Src = addrOf(r.Src)
		for _, nh := range r.MultiPath {
			sr.Multipath = append(sr.Multipath, names[nh.LinkIndex])
		}
		st.Routes = append(st.Routes, sr)
	}
	slices.SortStableFunc(st.Routes, compareRoute)
	return st, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func compareRoute(a, b Route) int {
	if c := comparePrefix(a.Dst, b.Dst); c != 0 {
		return c
	}
	if c := a.Metric - b.Metric; c != 0 {
		return c
	}
	return strings.Compare(a.Link, b.Link)
}
