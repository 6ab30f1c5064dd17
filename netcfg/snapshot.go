package netcfg

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Snapshot is what a set of links looked like before a try: enough to put
// them back. It is JSON so that the pending try record can carry it to the
// watchdog process.
type Snapshot struct {
	Taken time.Time      `json:"taken"`
	Links []LinkSnapshot `json:"links"`
	// Routes are the main table's routes through the links, the default
	// route included. Routes the kernel derives from addresses and link
	// state (proto kernel) are left out: restoring those brings them back.
	Routes []RouteSnapshot `json:"routes,omitempty"`
}

// LinkSnapshot is one link. A link that did not exist has only Name.
type LinkSnapshot struct {
	Name   string `json:"name"`
	Exists bool   `json:"exists"`
	// Kind is the netlink kind: bridge, vlan, veth, dummy, device (a NIC) or another.
	Kind   string `json:"kind,omitempty"`
	MAC    string `json:"mac,omitempty"`
	MTU    int    `json:"mtu,omitempty"`
	Up     bool   `json:"up,omitempty"`
	Master string `json:"master,omitempty"`
	// Addresses are in the kernel's order (the first of a subnet is its
	// primary). IPv6 link-local addresses are left out: the kernel makes them.
	Addresses []AddrSnapshot  `json:"addresses,omitempty"`
	VLAN      *VLANSnapshot   `json:"vlan,omitempty"`
	Bridge    *BridgeSnapshot `json:"bridge,omitempty"`
}

// AddrSnapshot is an address with its prefix, e.g. 192.0.2.10/24.
type AddrSnapshot struct {
	CIDR  string `json:"cidr"`
	Flags int    `json:"flags,omitempty"`
	// Lifetimes in seconds of a dynamic (DHCP, SLAAC) address; 0 for a permanent one.
	ValidLft     int `json:"validLft,omitempty"`
	PreferredLft int `json:"preferredLft,omitempty"`
}

// VLANSnapshot is what makes a VLAN sub-interface.
type VLANSnapshot struct {
	Parent   string `json:"parent"`
	ID       int    `json:"id"`
	Protocol string `json:"protocol,omitempty"` // 802.1Q (default) or 802.1ad
}

// BridgeSnapshot holds the bridge settings a try may change.
type BridgeSnapshot struct {
	STP            bool  `json:"stp,omitempty"`
	ForwardDelayMS int64 `json:"forwardDelayMs,omitempty"`
	VLANFiltering  bool  `json:"vlanFiltering,omitempty"`
}

// RouteSnapshot is one route of the main table.
type RouteSnapshot struct {
	Link     string `json:"link"`
	Family   string `json:"family"` // ipv4 or ipv6
	Dst      string `json:"dst"`    // CIDR, or "default"
	Gateway  string `json:"gateway,omitempty"`
	Src      string `json:"src,omitempty"`
	Metric   int    `json:"metric,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
	Scope    int    `json:"scope,omitempty"`
	Flags    int    `json:"flags,omitempty"`
}

// snapNotFound reports a netlink "no such link".
func snapNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// snapRetry runs a netlink dump again when the kernel says it was
// interrupted by a concurrent change.
func snapRetry[T any](f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 5 {
		if v, err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

// key identifies a route for comparison: what the kernel matches on.
func (r RouteSnapshot) key() string {
	return strings.Join([]string{r.Family, r.Dst, r.Gateway, r.Link, fmt.Sprint(r.Metric)}, "|")
}

func (r RouteSnapshot) String() string {
	s := r.Dst
	if r.Gateway != "" {
		s += " via " + r.Gateway
	}
	return s + " dev " + r.Link
}

func (r RouteSnapshot) route(linkIndex int) (*netlink.Route, error) {
	nr := &netlink.Route{
		LinkIndex: linkIndex,
		Table:     unix.RT_TABLE_MAIN,
		Priority:  r.Metric,
		Protocol:  netlink.RouteProtocol(r.Protocol),
		Scope:     netlink.Scope(r.Scope),
		Flags:     r.Flags,
		Type:      unix.RTN_UNICAST,
		Family:    unix.AF_INET,
	}
	zero := net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	if r.Family == "ipv6" {
		nr.Family = unix.AF_INET6
		zero = net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	nr.Dst = &zero
	if r.Dst != "default" {
		_, dst, err := net.ParseCIDR(r.Dst)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", r, err)
		}
		nr.Dst = dst
	}
	if r.Gateway != "" {
		if nr.Gw = net.ParseIP(r.Gateway); nr.Gw == nil {
			return nil, fmt.Errorf("route %s: bad gateway", r)
		}
	}
	if r.Src != "" {
		if nr.Src = net.ParseIP(r.Src); nr.Src == nil {
			return nil, fmt.Errorf("route %s: bad source", r)
		}
	}
	return nr, nil
}
