package netcfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
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
		bi, err := snapBridgeInfo(a.Index)
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

// Restore makes the links look as they did when s was taken: links that
// did not exist are deleted (bridges and VLANs only, never a NIC), bridges,
// VLANs and dummies that existed are recreated, then master, bridge
// settings, MTU, address sets, admin state and routes are put back. It is
// idempotent and best effort: it carries on past a failure and returns
// all of them joined. Once started it runs to the end whatever ctx says:
// half a rollback is worse than a late one.
func (s *Snapshot) Restore(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for i := range s.Links {
		add(restoreRemoveStray(&s.Links[i]))
	}
	add(s.restoreCreate())
	// The rest works on the links that exist now; one that could not be
	// recreated has been reported once.
	live := s.restorePresent()
	for i := range live.Links {
		add(restoreMaster(&live.Links[i]))
	}
	for i := range live.Links {
		add(restoreBridge(&live.Links[i]))
	}
	add(live.restoreMTU())
	for i := range live.Links {
		if l := &live.Links[i]; !l.Up {
			add(restoreAdmin(l))
		}
	}
	add(live.restoreAddrs())
	for i := range live.Links {
		if l := &live.Links[i]; l.Up {
			add(restoreAdmin(l))
		}
	}
	add(live.restoreRoutes())
	if len(errs) > 0 {
		return fmt.Errorf("restore: %w", errors.Join(errs...))
	}
	return nil
}

// restorePresent is s cut down to the links that existed and exist now,
// and the routes through them.
func (s *Snapshot) restorePresent() *Snapshot {
	live := &Snapshot{Taken: s.Taken}
	have := map[string]bool{}
	for _, l := range s.Links {
		if !l.Exists {
			continue
		}
		if _, err := netlink.LinkByName(l.Name); err == nil {
			live.Links = append(live.Links, l)
			have[l.Name] = true
		}
	}
	for _, r := range s.Routes {
		if have[r.Link] {
			live.Routes = append(live.Routes, r)
		}
	}
	return live
}

// restoreDeletable: the kinds a restore may delete (and recreate).
func restoreDeletable(kind string) bool { return kind == "bridge" || kind == "vlan" }

func restoreSameKind(want *LinkSnapshot, cur netlink.Link) bool {
	if want.Kind != cur.Type() {
		return false
	}
	v, ok := cur.(*netlink.Vlan)
	if !ok || want.VLAN == nil {
		return true
	}
	p, err := netlink.LinkByIndex(v.ParentIndex)
	proto := ""
	if v.VlanProtocol == netlink.VLAN_PROTOCOL_8021AD {
		proto = "802.1ad"
	}
	return err == nil && p.Attrs().Name == want.VLAN.Parent && v.VlanId == want.VLAN.ID && proto == want.VLAN.Protocol
}

// restoreRemoveStray deletes a bridge or VLAN that did not exist, or
// exists now as something else.
func restoreRemoveStray(want *LinkSnapshot) error {
	cur, err := netlink.LinkByName(want.Name)
	switch {
	case snapNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("link %q: %w", want.Name, err)
	case want.Exists && restoreSameKind(want, cur):
		return nil
	case !restoreDeletable(cur.Type()):
		if !want.Exists {
			return fmt.Errorf("link %q did not exist but is now a %s: not deleting it", want.Name, cur.Type())
		}
		return fmt.Errorf("link %q was a %s but is now a %s: not deleting it", want.Name, want.Kind, cur.Type())
	}
	if err := netlink.LinkDel(cur); err != nil && !snapNotFound(err) {
		return fmt.Errorf("link %q: delete %s: %w", want.Name, cur.Type(), err)
	}
	return nil
}

// restoreCreate recreates the missing links, in passes while that makes
// progress: a VLAN's parent may be a bridge or VLAN recreated before it.
func (s *Snapshot) restoreCreate() error {
	var missing []*LinkSnapshot
	for i := range s.Links {
		l := &s.Links[i]
		if !l.Exists {
			continue
		}
		if _, err := netlink.LinkByName(l.Name); snapNotFound(err) {
			missing = append(missing, l)
		}
	}
	var errs []error
	for len(missing) > 0 {
		var next []*LinkSnapshot
		errs = errs[:0]
		for _, l := range missing {
			if err := restoreCreateLink(l); err != nil {
				next = append(next, l)
				errs = append(errs, err)
			}
		}
		if len(next) == len(missing) {
			break
		}
		missing = next
	}
	return errors.Join(errs...)
}

func restoreCreateLink(l *LinkSnapshot) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = l.Name
	attrs.MTU = l.MTU
	var link netlink.Link
	switch l.Kind {
	case "bridge":
		// The old MAC keeps the neighbours' ARP caches (and the IPv6
		// link-local address) valid.
		if mac, err := net.ParseMAC(l.MAC); err == nil {
			attrs.HardwareAddr = mac
		}
		br := &netlink.Bridge{LinkAttrs: attrs}
		if l.Bridge != nil && l.Bridge.VLANFiltering {
			// Only when on: a kernel without VLAN filtering refuses the attribute.
			on := true
			br.VlanFiltering = &on
		}
		link = br
	case "vlan":
		if l.VLAN == nil {
			return fmt.Errorf("link %q: recreate vlan: parent unknown", l.Name)
		}
		p, err := netlink.LinkByName(l.VLAN.Parent)
		if err != nil {
			return fmt.Errorf("link %q: recreate vlan: parent %q: %w", l.Name, l.VLAN.Parent, err)
		}
		attrs.ParentIndex = p.Attrs().Index
		v := &netlink.Vlan{LinkAttrs: attrs, VlanId: l.VLAN.ID, VlanProtocol: netlink.VLAN_PROTOCOL_8021Q}
		if l.VLAN.Protocol == "802.1ad" {
			v.VlanProtocol = netlink.VLAN_PROTOCOL_8021AD
		}
		link = v
	case "dummy":
		link = &netlink.Dummy{LinkAttrs: attrs}
	default:
		return fmt.Errorf("link %q (%s) has disappeared and cannot be recreated", l.Name, l.Kind)
	}
	if err := netlink.LinkAdd(link); err != nil {
		return fmt.Errorf("link %q: recreate %s: %w", l.Name, l.Kind, err)
	}
	return nil
}

func restoreMaster(want *LinkSnapshot) error {
	if !want.Exists {
		return nil
	}
	cur, err := netlink.LinkByName(want.Name)
	if err != nil {
		return fmt.Errorf("link %q: %w", want.Name, err)
	}
	curMaster := ""
	if idx := cur.Attrs().MasterIndex; idx != 0 {
		if m, err := netlink.LinkByIndex(idx); err == nil {
			curMaster = m.Attrs().Name
		}
	}
	if curMaster == want.Master {
		return nil
	}
	if want.Master == "" {
		if err := netlink.LinkSetNoMaster(cur); err != nil {
			return fmt.Errorf("link %q: release from %q: %w", want.Name, curMaster, err)
		}
		return nil
	}
	m, err := netlink.LinkByName(want.Master)
	if err != nil {
		return fmt.Errorf("link %q: master %q: %w", want.Name, want.Master, err)
	}
	if err := netlink.LinkSetMaster(cur, m); err != nil {
		return fmt.Errorf("link %q: set master %q: %w", want.Name, want.Master, err)
	}
	return nil
}

func restoreBridge(want *LinkSnapshot) error {
	if !want.Exists || want.Bridge == nil {
		return nil
	}
	cur, err := netlink.LinkByName(want.Name)
	if err != nil {
		return fmt.Errorf("bridge %q: %w", want.Name, err)
	}
	bi, err := snapBridgeInfo(cur.Attrs().Index)
	if err != nil {
		return fmt.Errorf("bridge %q: %w", want.Name, err)
	}
	fd := time.Duration(want.Bridge.ForwardDelayMS) * time.Millisecond
	if bi.vlanFiltering != want.Bridge.VLANFiltering {
		if err := netlink.BridgeSetVlanFiltering(cur, want.Bridge.VLANFiltering); err != nil {
			return fmt.Errorf("bridge %q: vlan filtering: %w", want.Name, err)
		}
	}
	if bi.stp == want.Bridge.STP && bi.forwardDelay == fd {
		return nil
	}
	if err := snapSetBridgeSTP(cur.Attrs().Index, want.Bridge.STP, fd); err != nil {
		return fmt.Errorf("bridge %q: %w", want.Name, err)
	}
	return nil
}

// restoreMTU sets NICs and veths first, then VLANs, then bridges, so that
// a child is never asked for more than its parent carries; a second pass
// retries what the order still got wrong.
func (s *Snapshot) restoreMTU() error {
	rank := func(kind string) int {
		switch kind {
		case "vlan":
			return 1
		case "bridge":
			return 2
		}
		return 0
	}
	var todo []*LinkSnapshot
	for i := range s.Links {
		if l := &s.Links[i]; l.Exists && l.MTU > 0 {
			todo = append(todo, l)
		}
	}
	slices.SortStableFunc(todo, func(a, b *LinkSnapshot) int { return rank(a.Kind) - rank(b.Kind) })
	var errs []error
	for range 2 {
		errs = errs[:0]
		var failed []*LinkSnapshot
		for _, l := range todo {
			cur, err := netlink.LinkByName(l.Name)
			if err != nil {
				errs = append(errs, fmt.Errorf("link %q: %w", l.Name, err))
				continue
			}
			if cur.Attrs().MTU == l.MTU {
				continue
			}
			if err := netlink.LinkSetMTU(cur, l.MTU); err != nil {
				errs = append(errs, fmt.Errorf("link %q: mtu %d: %w", l.Name, l.MTU, err))
				failed = append(failed, l)
			}
		}
		if len(failed) == 0 {
			break
		}
		todo = failed
	}
	return errors.Join(errs...)
}

func restoreAdmin(want *LinkSnapshot) error {
	cur, err := netlink.LinkByName(want.Name)
	if err != nil {
		return fmt.Errorf("link %q: %w", want.Name, err)
	}
	up := cur.Attrs().Flags&net.FlagUp != 0
	switch {
	case want.Up && !up:
		err = netlink.LinkSetUp(cur)
	case !want.Up && up:
		err = netlink.LinkSetDown(cur)
	}
	if err != nil {
		return fmt.Errorf("link %q: set up=%v: %w", want.Name, want.Up, err)
	}
	return nil
}

// restoreAddrs removes the extra addresses from every link before it adds
// any missing one, so that an address moved between two of the links
// comes back in one pass; the add pass reads again because removing a
// primary address also removes its secondaries.
func (s *Snapshot) restoreAddrs() error {
	var errs []error
	for i := range s.Links {
		l := &s.Links[i]
		if !l.Exists {
			continue
		}
		cur, have, err := restoreListAddrs(l.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		want := map[string]bool{}
		for _, a := range l.Addresses {
			want[a.CIDR] = true
		}
		for _, a := range have {
			if want[a.IPNet.String()] {
				continue
			}
			if err := netlink.AddrDel(cur, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("link %q: remove address %s: %w", l.Name, a.IPNet, err))
			}
		}
	}
	for i := range s.Links {
		l := &s.Links[i]
		if !l.Exists || len(l.Addresses) == 0 {
			continue
		}
		cur, have, err := restoreListAddrs(l.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		present := map[string]bool{}
		for _, a := range have {
			present[a.IPNet.String()] = true
		}
		for _, a := range l.Addresses {
			if present[a.CIDR] {
				continue
			}
			ipn, err := netlink.ParseIPNet(a.CIDR)
			if err != nil {
				errs = append(errs, fmt.Errorf("link %q: address %q: %w", l.Name, a.CIDR, err))
				continue
			}
			na := &netlink.Addr{IPNet: ipn, Flags: a.Flags, ValidLft: a.ValidLft, PreferedLft: a.PreferredLft}
			if err := netlink.AddrAdd(cur, na); err != nil && !errors.Is(err, unix.EEXIST) {
				errs = append(errs, fmt.Errorf("link %q: add address %s: %w", l.Name, a.CIDR, err))
			}
		}
	}
	return errors.Join(errs...)
}

// restoreKernelAddrFlags are states the kernel reports, not requests: a
// snapshot leaves them out.
const restoreKernelAddrFlags = unix.IFA_F_SECONDARY | unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED |
	unix.IFA_F_DEPRECATED | unix.IFA_F_OPTIMISTIC | unix.IFA_F_PERMANENT

func restoreListAddrs(name string) (netlink.Link, []netlink.Addr, error) {
	cur, err := netlink.LinkByName(name)
	if err != nil {
		return nil, nil, fmt.Errorf("link %q: %w", name, err)
	}
	addrs, err := snapRetry(func() ([]netlink.Addr, error) { return netlink.AddrList(cur, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, nil, fmt.Errorf("link %q: addresses: %w", name, err)
	}
	kept := addrs[:0]
	for _, a := range addrs {
		if snapAddrKept(a) {
			kept = append(kept, a)
		}
	}
	return cur, kept, nil
}

// restoreRoutes deletes the routes through the links that were not there,
// then adds the missing ones, looping while that makes progress (a route
// via a gateway needs the route that reaches the gateway).
func (s *Snapshot) restoreRoutes() error {
	names := map[int]string{}
	for _, l := range s.Links {
		if !l.Exists {
			continue
		}
		if cur, err := netlink.LinkByName(l.Name); err == nil {
			names[cur.Attrs().Index] = l.Name
		}
	}
	want := map[string]bool{}
	for _, r := range s.Routes {
		want[r.key()] = true
	}
	list := func() (map[string]bool, []netlink.Route, error) {
		rs, err := snapRetry(func() ([]netlink.Route, error) {
			return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("routes: %w", err)
		}
		have := map[string]bool{}
		var ours []netlink.Route
		for _, r := range rs {
			name, ok := names[r.LinkIndex]
			if !ok || !snapRouteKept(r) {
				continue
			}
			have[snapRoute(r, name).key()] = true
			ours = append(ours, r)
		}
		return have, ours, nil
	}
	_, ours, err := list()
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range ours {
		rs := snapRoute(r, names[r.LinkIndex])
		if want[rs.key()] {
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route %s: %w", rs, err))
		}
	}
	todo := s.Routes
	for len(todo) > 0 {
		have, _, err := list()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		var failed []RouteSnapshot
		var addErrs []error
		for _, r := range todo {
			if have[r.key()] {
				continue
			}
			link, err := netlink.LinkByName(r.Link)
			if err != nil {
				addErrs = append(addErrs, fmt.Errorf("route %s: %w", r, err))
				continue
			}
			nr, err := r.route(link.Attrs().Index)
			if err == nil {
				err = netlink.RouteReplace(nr)
			}
			if err != nil {
				failed = append(failed, r)
				addErrs = append(addErrs, fmt.Errorf("add route %s: %w", r, err))
			}
		}
		if len(failed) == 0 || len(failed) == len(todo) {
			errs = append(errs, addErrs...)
			break
		}
		todo = failed
	}
	return errors.Join(errs...)
}

// snapBridge is what the netlink package does not parse: STP, forward
// delay, and a port's STP state.
type snapBridge struct {
	stp           bool
	forwardDelay  time.Duration
	vlanFiltering bool
	// port: the link is a bridge port, in portState (BR_STATE_*).
	port      bool
	portState uint8
}

// Bridge port STP states (BR_STATE_*).
const (
	snapPortDisabled   = 0
	snapPortListening  = 1
	snapPortLearning   = 2
	snapPortForwarding = 3
	snapPortBlocking   = 4
)

func snapPortStateName(s uint8) string {
	switch s {
	case snapPortDisabled:
		return "disabled"
	case snapPortListening:
		return "listening"
	case snapPortLearning:
		return "learning"
	case snapPortForwarding:
		return "forwarding"
	case snapPortBlocking:
		return "blocking"
	}
	return fmt.Sprintf("state %d", s)
}

// snapUserHZ is the unit (clock_t) of the kernel's bridge timers over netlink.
const snapUserHZ = 100

// snapBridgeInfo reads a link's bridge and bridge-port attributes by a raw
// RTM_GETLINK in the current network namespace.
func snapBridgeInfo(index int) (snapBridge, error) {
	var bi snapBridge
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, 0)
	if err != nil {
		return bi, fmt.Errorf("read bridge attributes of link %d: %w", index, err)
	}
	if len(msgs) != 1 {
		return bi, fmt.Errorf("read bridge attributes of link %d: %d answers", index, len(msgs))
	}
	ifi := nl.DeserializeIfInfomsg(msgs[0])
	attrs, err := nl.ParseRouteAttr(msgs[0][ifi.Len():])
	if err != nil {
		return bi, fmt.Errorf("read bridge attributes of link %d: %w", index, err)
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK != unix.IFLA_LINKINFO {
			continue
		}
		infos, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return bi, fmt.Errorf("read bridge attributes of link %d: %w", index, err)
		}
		var kind, slaveKind string
		for _, info := range infos {
			switch info.Attr.Type & nl.NLA_TYPE_MASK {
			case nl.IFLA_INFO_KIND:
				kind = strings.TrimRight(string(info.Value), "\x00")
			case nl.IFLA_INFO_SLAVE_KIND:
				slaveKind = strings.TrimRight(string(info.Value), "\x00")
			case nl.IFLA_INFO_DATA:
				if kind != "bridge" {
					continue
				}
				data, err := nl.ParseRouteAttr(info.Value)
				if err != nil {
					return bi, fmt.Errorf("read bridge attributes of link %d: %w", index, err)
				}
				for _, d := range data {
					switch d.Attr.Type & nl.NLA_TYPE_MASK {
					case nl.IFLA_BR_STP_STATE:
						bi.stp = len(d.Value) >= 4 && snapNative32(d.Value) != 0
					case nl.IFLA_BR_FORWARD_DELAY:
						if len(d.Value) >= 4 {
							bi.forwardDelay = time.Duration(snapNative32(d.Value)) * time.Second / snapUserHZ
						}
					case nl.IFLA_BR_VLAN_FILTERING:
						bi.vlanFiltering = len(d.Value) >= 1 && d.Value[0] != 0
					}
				}
			case nl.IFLA_INFO_SLAVE_DATA:
				if slaveKind != "bridge" {
					continue
				}
				data, err := nl.ParseRouteAttr(info.Value)
				if err != nil {
					return bi, fmt.Errorf("read bridge port attributes of link %d: %w", index, err)
				}
				for _, d := range data {
					if d.Attr.Type&nl.NLA_TYPE_MASK == nl.IFLA_BRPORT_STATE && len(d.Value) >= 1 {
						bi.port, bi.portState = true, d.Value[0]
					}
				}
			}
		}
	}
	return bi, nil
}

func snapNative32(b []byte) uint32 { return nl.NativeEndian().Uint32(b[:4]) }

// snapSetBridgeSTP sets a bridge's STP state and forward delay. The kernel
// accepts a forward delay of 2-30 s only while STP is on, so the delay is
// set first when turning STP on and last when turning it off.
func snapSetBridgeSTP(index int, stp bool, forwardDelay time.Duration) error {
	set := func(attr int, v uint32) error {
		req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
		msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
		msg.Index = int32(index)
		req.AddData(msg)
		li := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
		li.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
		data := li.AddRtAttr(nl.IFLA_INFO_DATA, nil)
		data.AddRtAttr(attr, nl.Uint32Attr(v))
		req.AddData(li)
		_, err := req.Execute(unix.NETLINK_ROUTE, 0)
		return err
	}
	setFD := func() error {
		if forwardDelay <= 0 {
			return nil
		}
		if err := set(nl.IFLA_BR_FORWARD_DELAY, uint32(forwardDelay*snapUserHZ/time.Second)); err != nil {
			return fmt.Errorf("set forward delay %v: %w", forwardDelay, err)
		}
		return nil
	}
	setSTP := func() error {
		v := uint32(0)
		if stp {
			v = 1
		}
		if err := set(nl.IFLA_BR_STP_STATE, v); err != nil {
			return fmt.Errorf("set stp %v: %w", stp, err)
		}
		return nil
	}
	if stp {
		if err := setFD(); err != nil {
			return err
		}
		return setSTP()
	}
	if err := setSTP(); err != nil {
		return err
	}
	return setFD()
}
