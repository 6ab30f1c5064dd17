package netcfg

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The netlink calls steps are made of. Links are looked up by name at run
// time: an index from the plan would be stale after a recreate.

func linkByName(h *handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %q: %w", name, err)
	}
	return l, nil
}

// gone reports an error that means "already not there", which an undo
// may meet when the kernel removed the thing along with something else.
func gone(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV) ||
		errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENOENT)
}

func createBridge(h *handle, name string, mtu int, stp, vlanFiltering bool) error {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}
	if vlanFiltering {
		// Only when on: a kernel without bridge VLAN support refuses the
		// attribute even to turn it off.
		br.VlanFiltering = &vlanFiltering
	}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("create bridge %q: %w", name, err)
	}
	if stp {
		if err := h.setBridgeSTP(name, true); err != nil {
			_ = h.LinkDel(br)
			return fmt.Errorf("bridge %q: turn STP on: %w", name, err)
		}
	}
	return nil
}

func setVLANFiltering(h *handle, name string, on bool) error {
	l, err := linkByName(h, name)
	if err != nil {
		return err
	}
	if err := h.BridgeSetVlanFiltering(l, on); err != nil {
		return fmt.Errorf("bridge %q: vlan filtering %s: %w", name, onOff(on), err)
	}
	return nil
}

func createVLAN(h *handle, name, parent string, id, mtu int) error {
	pl, err := linkByName(h, parent)
	if err != nil {
		return fmt.Errorf("create VLAN %q: parent: %w", name, err)
	}
	v := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: pl.Attrs().Index, MTU: mtu}, VlanId: id}
	if err := h.LinkAdd(v); err != nil {
		return fmt.Errorf("create VLAN %q on %q: %w", name, parent, err)
	}
	return nil
}

func delLink(h *handle, name string) error {
	l, err := linkByName(h, name)
	if gone(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := h.LinkDel(l); err != nil && !gone(err) {
		return fmt.Errorf("delete %q: %w", name, err)
	}
	return nil
}

func setMTU(h *handle, name string, mtu int) error {
	l, err := linkByName(h, name)
	if err != nil {
		return err
	}
	if err := h.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("%q: set MTU %d: %w", name, mtu, err)
	}
	return nil
}

func ensureMTU(h *handle, name string, mtu int) error {
	l, err := linkByName(h, name)
	if err != nil {
		return err
	}
	if l.Attrs().MTU == mtu {
		return nil
	}
	return setMTU(h, name, mtu)
}

func setUp(h *handle, name string, up bool) error {
	l, err := linkByName(h, name)
	if err != nil {
		return err
	}
	if up {
		err = h.LinkSetUp(l)
	} else {
		err = h.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("%q: set %s: %w", name, map[bool]string{true: "up", false: "down"}[up], err)
	}
	return nil
}

// setMaster makes port a port of master, or of none when master is "".
func setMaster(h *handle, port, master string) error {
	pl, err := linkByName(h, port)
	if err != nil {
		return err
	}
	if master == "" {
		if err := h.LinkSetNoMaster(pl); err != nil {
			return fmt.Errorf("release %q: %w", port, err)
		}
		return nil
	}
	ml, err := linkByName(h, master)
	if err != nil {
		return err
	}
	if err := h.LinkSetMaster(pl, ml); err != nil {
		return fmt.Errorf("enslave %q to %q: %w", port, master, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// addAddr adds a permanent address; tolerant (for undos) accepts one that
// is already there.
func addAddr(h *handle, link string, a netip.Prefix, tolerant bool) error {
	l, err := linkByName(h, link)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(a)}); err != nil && !(tolerant && errors.Is(err, unix.EEXIST)) {
		return fmt.Errorf("%q: add address %s: %w", link, a, err)
	}
	return nil
}

// delAddr removes an address; tolerant (for undos) accepts one already
// gone, link included.
func delAddr(h *handle, link string, a netip.Prefix, tolerant bool) error {
	l, err := linkByName(h, link)
	if tolerant && gone(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := h.AddrDel(l, &netlink.Addr{IPNet: ipNet(a)}); err != nil && !(tolerant && gone(err)) {
		return fmt.Errorf("%q: remove address %s: %w", link, a, err)
	}
	return nil
}

func nlRoute(r Route, linkIndex int) *netlink.Route {
	nr := &netlink.Route{
		LinkIndex: linkIndex,
		Dst:       ipNet(r.Dst),
		Table:     unix.RT_TABLE_MAIN,
		Priority:  r.Metric,
		Protocol:  netlink.RouteProtocol(r.Protocol),
		Scope:     netlink.Scope(r.Scope),
		Type:      unix.RTN_UNICAST,
	}
	if r.Gateway.IsValid() {
		nr.Gw = r.Gateway.AsSlice()
	}
	if r.Src.IsValid() {
		nr.Src = r.Src.AsSlice()
	}
	if r.OnLink {
		nr.Flags = unix.RTNH_F_ONLINK
	}
	return nr
}

// replaceRoute adds r through link, replacing a route with the same
// destination and metric (atomically, for a default route).
func replaceRoute(h *handle, r Route, link string) error {
	l, err := linkByName(h, link)
	if err != nil {
		return err
	}
	if err := h.RouteReplace(nlRoute(r, l.Attrs().Index)); err != nil {
		return fmt.Errorf("route %s dev %s: %w", r, link, err)
	}
	return nil
}

// delRoute removes r through link; one already gone (the kernel drops
// routes with the address or link they depend on) is not an error.
func delRoute(h *handle, r Route, link string) error {
	l, err := linkByName(h, link)
	if gone(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := h.RouteDel(nlRoute(r, l.Attrs().Index)); err != nil && !gone(err) {
		return fmt.Errorf("remove route %s dev %s: %w", r, link, err)
	}
	return nil
}

// recreate rebuilds a deleted bridge or VLAN as snap describes it: ports,
// addresses, up state, routes, and the VLANs that went with it.
func recreate(h *handle, snap snapshot) error {
	switch snap.Type {
	case "bridge":
		if err := createBridge(h, snap.Name, snap.MTU, snap.STP, snap.VLANFiltering); err != nil {
			return err
		}
	case "vlan":
		if err := createVLAN(h, snap.Name, snap.Parent, snap.VLANID, snap.MTU); err != nil {
			return err
		}
	default:
		return fmt.Errorf("recreate %q: cannot make a %s link", snap.Name, snap.Type)
	}
	var errs []error
	for _, port := range snap.ports {
		errs = append(errs, setMaster(h, port, snap.Name))
	}
	if len(snap.ports) > 0 {
		errs = append(errs, ensureMTU(h, snap.Name, snap.MTU))
	}
	for _, a := range snap.Addresses {
		errs = append(errs, addAddr(h, snap.Name, a, true))
	}
	if snap.Up {
		errs = append(errs, setUp(h, snap.Name, true))
	}
	for _, r := range snap.routes {
		errs = append(errs, replaceRoute(h, r, snap.Name))
	}
	for _, c := range snap.children {
		errs = append(errs, recreate(h, c))
	}
	return errors.Join(errs...)
}
