package netcfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

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
	bi, err := readBridgeAttrs(nil, cur.Attrs().Index)
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
	if err := writeBridgeSTP(nil, cur.Attrs().Index, want.Bridge.STP, fd); err != nil {
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
