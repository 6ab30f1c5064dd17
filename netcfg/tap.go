package netcfg

// TAP devices for VM NICs. A TAP is created persistent and with no process
// attached, so QEMU opens it by name
// (-netdev tap,ifname=NAME,script=no,downscript=no,vhost=off); it is
// attached to its bridge with the bridge's MTU, and marked with an alias so
// that gc lists only ours.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/revert"
)

// tapPrefix starts every virtcon TAP name.
const tapPrefix = "vc"

// tapAlias marks a TAP as virtcon's (ip link shows it as "alias").
const tapAlias = "virtcon-tap"

var (
	// ErrTAPNotOurs is returned when a link of the TAP's name exists but
	// is not a virtcon TAP: it is never reused or deleted.
	ErrTAPNotOurs = errors.New("link exists and is not a virtcon tap")
	// ErrTAPInUse is returned when the TAP already has a process attached
	// (the QEMU of a running VM).
	ErrTAPInUse = errors.New("tap is in use by a running process")
)

// TAPName is the TAP of NIC index (0-based) of the VM with uid: "vc", 8 hex
// digits of sha256(uid), index in hex — at most 15 bytes (the kernel's
// limit) for index ≤ 0xFFFFF; larger indexes wrap. The hash rather than the
// uid's own leading digits, because time-ordered UUIDs (v7) share them.
// Within one VM names cannot collide (same fixed-width prefix, distinct
// suffixes); across VMs two of them share a prefix with probability about
// n²/2³³ for n VMs, and CreateTAP then refuses rather than steal the other
// VM's TAP (ErrTAPInUse, or ErrTAPNotOurs for a foreign link).
func TAPName(uid string, index int) string {
	sum := sha256.Sum256([]byte(uid))
	return fmt.Sprintf("%s%x%x", tapPrefix, sum[:4], uint(index)&0xFFFFF)
}

// CreateTAP makes the persistent TAP name (single queue, vnet_hdr, no
// packet info, no process attached), with the given MTU (the bridge's when
// mtu is 0), attached to bridge, and up. A free TAP of ours with that name
// is reused, so a retry after a crash works; a link that is not our TAP
// (ErrTAPNotOurs) or a TAP in use (ErrTAPInUse) is refused. A failure
// leaves no TAP behind that this call created.
func CreateTAP(ctx context.Context, name, bridge string, mtu int) error {
	if err := createTAP(ctx, name, bridge, mtu); err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	return nil
}

func createTAP(ctx context.Context, name, bridge string, mtu int) error {
	if err := tapCheckName(name); err != nil {
		return err
	}
	if mtu < 0 {
		return fmt.Errorf("%w: mtu %d", ErrInvalid, mtu)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", bridge, err)
	}
	if br.Type() != "bridge" {
		return fmt.Errorf("%w: %s is a %s, not a bridge", ErrInvalid, bridge, br.Type())
	}
	if mtu == 0 {
		mtu = br.Attrs().MTU
	}

	r := revert.New()
	defer r.Fail()
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		tap := &netlink.Tuntap{
			LinkAttrs: netlink.NewLinkAttrs(),
			Mode:      netlink.TUNTAP_MODE_TAP,
			// No multi_queue: QEMU with one queue opens it without, and
			// the kernel refuses a mismatch. TUN_EXCL: fail rather than
			// attach if someone creates the name meanwhile.
			Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_TUN_EXCL,
		}
		tap.Name = name
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			// Not ours to delete by name if it cannot be read back.
			return err
		}
		created := link
		r.Add(func() error { return netlink.LinkDel(created) })
		if err := netlink.LinkSetAlias(link, tapAlias); err != nil {
			return fmt.Errorf("set alias: %w", err)
		}
	case err != nil:
		return err
	case !tapIsOurs(link):
		return fmt.Errorf("%w (a %s, alias %q)", ErrTAPNotOurs, link.Type(), link.Attrs().Alias)
	case link.Attrs().RawFlags&unix.IFF_LOWER_UP != 0:
		// A TAP has carrier exactly while a process holds it open.
		return ErrTAPInUse
	}
	if link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("set mtu %d: %w", mtu, err)
		}
	}
	if link.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMaster(link, br); err != nil {
			return fmt.Errorf("attach to bridge %s: %w", bridge, err)
		}
	}
	if link.Attrs().RawFlags&unix.IFF_UP == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set up: %w", err)
		}
	}
	r.Success()
	return nil
}

// DeleteTAP deletes our TAP name; one that does not exist is already
// deleted. A link of that name that is not our TAP is refused
// (ErrTAPNotOurs). A QEMU still holding the TAP loses it: callers delete
// TAPs of stopped VMs only.
func DeleteTAP(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	if !tapIsOurs(link) {
		return fmt.Errorf("tap %s: %w (a %s, alias %q)", name, ErrTAPNotOurs, link.Type(), link.Attrs().Alias)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("tap %s: delete: %w", name, err)
	}
	return nil
}

// ListTAPs returns the names of virtcon's TAPs, sorted, for gc to compare
// with the VMs that should have them.
func ListTAPs(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list taps: %w", err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list taps: %w", err)
	}
	var names []string
	for _, l := range links {
		if tapIsOurs(l) {
			names = append(names, l.Attrs().Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// tapIsOurs: a TAP named like ours and carrying our alias.
func tapIsOurs(l netlink.Link) bool {
	t, ok := l.(*netlink.Tuntap)
	return ok && t.Mode == netlink.TUNTAP_MODE_TAP &&
		strings.HasPrefix(t.Name, tapPrefix) && t.Alias == tapAlias
}

// tapCheckName refuses a name the kernel would refuse, or one ListTAPs
// would not list.
func tapCheckName(name string) error {
	if err := natCheckLinkName(name); err != nil {
		return err
	}
	if !strings.HasPrefix(name, tapPrefix) {
		return fmt.Errorf("%w: tap name %q: want the prefix %q (see TAPName)", ErrInvalid, name, tapPrefix)
	}
	return nil
}
