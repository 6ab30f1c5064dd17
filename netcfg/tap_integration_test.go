//go:build integration

package netcfg

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tapOpenLikeQEMU attaches to the TAP name as QEMU does for
// -netdev tap,ifname=NAME with one queue; the caller closes the fd.
func tapOpenLikeQEMU(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		unix.Close(fd)
		return -1, errno
	}
	return fd, nil
}

func TestTAPLifecycle(t *testing.T) {
	natRequire(t, "/dev/net/tun")
	ns := newTestNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := ns.handle(t)

	ns.must(t, func() error {
		br := &netlink.Bridge{LinkAttrs: netlink.NewLinkAttrs()}
		br.Name, br.MTU = "vcbr-tap", 1400
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		// someone else's link with a name like ours (a veth: this kernel may lack the dummy driver)
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vcforeign0"}, PeerName: "vcforeign1"})
	})
	br, err := h.LinkByName("vcbr-tap")
	if err != nil {
		t.Fatal(err)
	}
	const uid = "6f1c2a9e-0b7d-4e3a-8c55-1d2e3f4a5b6c"
	tap0, tap1 := TAPName(uid, 0), TAPName(uid, 1)

	// Create (twice: the second is a no-op) with the bridge's MTU, and one
	// with an explicit MTU.
	var index int
	for i := 0; i < 2; i++ {
		ns.must(t, func() error { return CreateTAP(ctx, tap0, "vcbr-tap", 0) })
		l, err := h.LinkByName(tap0)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && l.Attrs().Index != index {
			t.Errorf("second CreateTAP recreated the TAP (index %d, was %d)", l.Attrs().Index, index)
		}
		index = l.Attrs().Index
		tap, ok := l.(*netlink.Tuntap)
		if !ok {
			t.Fatalf("%s is a %T; want a tuntap", tap0, l)
		}
		if tap.Mode != netlink.TUNTAP_MODE_TAP || tap.NonPersist ||
			tap.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 || tap.Flags&netlink.TUNTAP_VNET_HDR == 0 || tap.Flags&netlink.TUNTAP_NO_PI == 0 {
			t.Errorf("tap mode %v persist=%t flags %#x; want a persistent single-queue TAP with vnet_hdr and no PI",
				tap.Mode, !tap.NonPersist, tap.Flags)
		}
		if a := l.Attrs(); a.MTU != 1400 || a.MasterIndex != br.Attrs().Index || a.Flags&net.FlagUp == 0 || a.Alias != tapAlias {
			t.Errorf("tap mtu %d master %d up=%t alias %q; want 1400, %d, up, %q",
				a.MTU, a.MasterIndex, a.Flags&net.FlagUp != 0, a.Alias, br.Attrs().Index, tapAlias)
		}
	}
	ns.must(t, func() error { return CreateTAP(ctx, tap1, "vcbr-tap", 1300) })
	if l, err := h.LinkByName(tap1); err != nil || l.Attrs().MTU != 1300 {
		t.Errorf("tap %s: %v; want MTU 1300", tap1, err)
	}

	// QEMU can open it by name; while it holds it the TAP is in use.
	var fd int
	ns.must(t, func() (err error) { fd, err = tapOpenLikeQEMU(tap0); return err })
	err = ns.run(func() error { return CreateTAP(ctx, tap0, "vcbr-tap", 0) })
	if !errors.Is(err, ErrTAPInUse) {
		t.Errorf("CreateTAP of an attached TAP = %v; want ErrTAPInUse", err)
	}
	unix.Close(fd)
	ns.must(t, func() error { return CreateTAP(ctx, tap0, "vcbr-tap", 0) })

	// Someone else's link of a vc name: not listed, not reused, not deleted.
	err = ns.run(func() error { return CreateTAP(ctx, "vcforeign0", "vcbr-tap", 0) })
	if !errors.Is(err, ErrTAPNotOurs) {
		t.Errorf("CreateTAP over a veth = %v; want ErrTAPNotOurs", err)
	}
	err = ns.run(func() error { return DeleteTAP(ctx, "vcforeign0") })
	if !errors.Is(err, ErrTAPNotOurs) {
		t.Errorf("DeleteTAP of a veth = %v; want ErrTAPNotOurs", err)
	}
	if _, err := h.LinkByName("vcforeign0"); err != nil {
		t.Errorf("veth: %v; want it kept", err)
	}

	// A missing bridge: refused, and no TAP left behind.
	tap2 := TAPName(uid, 2)
	err = ns.run(func() error { return CreateTAP(ctx, tap2, "vcbr-none", 0) })
	if err == nil {
		t.Error("CreateTAP onto a missing bridge succeeded")
	}
	if _, err := h.LinkByName(tap2); err == nil {
		t.Errorf("failed CreateTAP left %s behind", tap2)
	}

	var names []string
	ns.must(t, func() (err error) { names, err = ListTAPs(ctx); return err })
	if want := []string{tap0, tap1}; !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Errorf("ListTAPs = %v; want %v", names, want)
	}

	for i := 0; i < 2; i++ { // the second time it is already gone
		ns.must(t, func() error { return DeleteTAP(ctx, tap0) })
	}
	if _, err := h.LinkByName(tap0); err == nil {
		t.Errorf("%s still exists after DeleteTAP", tap0)
	}
	ns.must(t, func() (err error) { names, err = ListTAPs(ctx); return err })
	if !slices.Equal(names, []string{tap1}) {
		t.Errorf("ListTAPs after delete = %v; want [%s]", names, tap1)
	}
	if _, err := os.Stat("/sys/class/net/" + tap1); err == nil {
		t.Errorf("%s is visible in the host's /sys/class/net: the TAP leaked out of the namespace", tap1)
	}
}
