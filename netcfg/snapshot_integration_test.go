//go:build integration

package netcfg

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/testutil"
)

// snapTestNormal makes two snapshots comparable: no time, addresses and
// routes in a fixed order.
func snapTestNormal(s *Snapshot) string {
	c := *s
	c.Taken = time.Time{}
	c.Links = slices.Clone(s.Links)
	for i := range c.Links {
		c.Links[i].Addresses = slices.Clone(c.Links[i].Addresses)
		slices.SortFunc(c.Links[i].Addresses, func(a, b AddrSnapshot) int { return strings.Compare(a.CIDR, b.CIDR) })
	}
	c.Routes = slices.Clone(s.Routes)
	slices.SortFunc(c.Routes, func(a, b RouteSnapshot) int { return strings.Compare(a.key(), b.key()) })
	b, _ := json.MarshalIndent(&c, "", "  ")
	return string(b)
}

func snapTestLink(s *Snapshot, name string) *LinkSnapshot {
	for i := range s.Links {
		if s.Links[i].Name == name {
			return &s.Links[i]
		}
	}
	return nil
}

// snapTestDo runs netlink steps in order, stopping at the first failure.
func snapTestDo(steps ...func() error) error {
	for i, f := range steps {
		if err := f(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

func snapLinkAdd(l netlink.Link) func() error { return func() error { return netlink.LinkAdd(l) } }

func snapByName(name string) netlink.Link {
	l, err := netlink.LinkByName(name)
	if err != nil {
		panic(fmt.Sprintf("link %s: %v", name, err))
	}
	return l
}

func snapAddr(name, cidr string, flags int) func() error {
	return func() error {
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return err
		}
		a.Flags = flags
		return netlink.AddrAdd(snapByName(name), a)
	}
}

func snapDelAddr(name, cidr string) func() error {
	return func() error {
		a, _ := netlink.ParseAddr(cidr)
		return netlink.AddrDel(snapByName(name), a)
	}
}

func snapRouteAdd(name, dst, gw string, metric int) func() error {
	return func() error {
		r := &netlink.Route{LinkIndex: snapByName(name).Attrs().Index, Gw: net.ParseIP(gw), Priority: metric}
		if dst != "" {
			_, ipn, err := net.ParseCIDR(dst)
			if err != nil {
				return err
			}
			r.Dst = ipn
		}
		return netlink.RouteAdd(r)
	}
}

func snapSetMaster(port, master string) func() error {
	return func() error { return netlink.LinkSetMaster(snapByName(port), snapByName(master)) }
}

func snapUp(name string) func() error {
	return func() error { return netlink.LinkSetUp(snapByName(name)) }
}

func snapMTU(name string, mtu int) func() error {
	return func() error { return netlink.LinkSetMTU(snapByName(name), mtu) }
}

func snapAttrs(name string) netlink.LinkAttrs {
	la := netlink.NewLinkAttrs()
	la.Name = name
	return la
}

// Snapshot, change MTU, masters, addresses, routes (the default route
// included), bridge settings, create and delete bridges, then Restore:
// the links look as before, and a second Restore changes nothing.
func TestSnapshotRestoreIntegration(t *testing.T) {
	testutil.RequireRoot(t, "creates network namespaces, veths and bridges")
	t.Parallel()
	tp := tryNewTopo(t)
	ctx := context.Background()
	links := []string{"up0", "brold", "dm0", "brkeep", "brnew"}

	tp.host.must(t, func() error {
		return snapTestDo(
			snapAddr("up0", "2001:db8::1/64", unix.IFA_F_NODAD),
			snapRouteAdd("up0", "198.51.100.0/24", "192.0.2.2", 50),
			snapRouteAdd("up0", "", "2001:db8::2", 0),
			// brold: a bridge with a veth port (dm0), an address, an explicit MTU
			snapLinkAdd(&netlink.Bridge{LinkAttrs: snapAttrs("brold")}),
			snapLinkAdd(&netlink.Veth{LinkAttrs: snapAttrs("dm0"), PeerName: "dm0p"}),
			snapSetMaster("dm0", "brold"),
			snapMTU("brold", 1400),
			snapAddr("brold", "203.0.113.1/24", 0),
			snapUp("dm0"), snapUp("brold"),
			// brkeep: a bridge whose settings the change turns
			snapLinkAdd(&netlink.Bridge{LinkAttrs: snapAttrs("brkeep")}),
		)
	})
	var before *Snapshot
	tp.host.must(t, func() error {
		var err error
		before, err = TakeSnapshot(ctx, links)
		return err
	})
	// What the snapshot saw.
	for _, c := range []struct {
		name string
		ok   func(l *LinkSnapshot) bool
	}{
		{"up0", func(l *LinkSnapshot) bool {
			return l.Exists && l.Kind == "veth" && l.Up && l.MTU == 1500 && len(l.Addresses) == 2
		}},
		{"brold", func(l *LinkSnapshot) bool {
			return l.Kind == "bridge" && l.MTU == 1400 && l.Bridge != nil && !l.Bridge.STP && l.Bridge.ForwardDelayMS == 15000
		}},
		{"dm0", func(l *LinkSnapshot) bool { return l.Kind == "veth" && l.Master == "brold" }},
		{"brnew", func(l *LinkSnapshot) bool { return !l.Exists }},
	} {
		if l := snapTestLink(before, c.name); l == nil || !c.ok(l) {
			t.Errorf("snapshot of %s: %+v", c.name, l)
		}
	}
	var routes []string
	for _, r := range before.Routes {
		routes = append(routes, r.String())
	}
	for _, want := range []string{"default via 192.0.2.2 dev up0", "default via 2001:db8::2 dev up0",
		"198.51.100.0/24 via 192.0.2.2 dev up0"} {
		if !slices.Contains(routes, want) {
			t.Errorf("snapshot routes %q lack %q", routes, want)
		}
	}

	tp.host.must(t, func() error {
		brkeep := snapByName("brkeep").Attrs().Index
		return snapTestDo(
			snapMTU("up0", 1400),
			// the uplink into a new bridge, its address and default route moved there
			snapLinkAdd(&netlink.Bridge{LinkAttrs: snapAttrs("brnew")}),
			snapUp("brnew"),
			snapSetMaster("up0", "brnew"),
			snapDelAddr("up0", tryHostAddr),
			snapDelAddr("up0", "2001:db8::1/64"),
			snapAddr("brnew", tryHostAddr, 0),
			snapAddr("brnew", "192.0.2.77/24", 0),
			snapRouteAdd("brnew", "", "192.0.2.2", 0),
			snapAddr("up0", "192.0.2.99/24", 0),
			// brold deleted; its port changed and downed
			func() error { return netlink.LinkDel(snapByName("brold")) },
			snapMTU("dm0", 9000),
			func() error { return netlink.LinkSetDown(snapByName("dm0")) },
			snapAddr("dm0", "100.64.0.1/24", 0),
			// brkeep: STP on, another forward delay, up
			func() error { return writeBridgeSTP(nil, brkeep, true, 4*time.Second) },
			snapUp("brkeep"),
		)
	})
	// and VLAN filtering, where the kernel has it
	if err := tp.host.run(func() error { return netlink.BridgeSetVlanFiltering(snapByName("brkeep"), true) }); err != nil {
		t.Logf("VLAN filtering not restored: this kernel has none (%v)", err)
	}
	snapTestRestoreTwice(t, tp, before, links)
}

// snapTestRestoreTwice checks that the links have changed since before,
// then restores before twice, each time checking that a new snapshot
// equals it, and that the peer is reachable.
func snapTestRestoreTwice(t *testing.T, tp *tryTopo, before *Snapshot, links []string) {
	t.Helper()
	ctx := context.Background()
	var changed *Snapshot
	tp.host.must(t, func() error {
		var err error
		changed, err = TakeSnapshot(ctx, links)
		return err
	})
	if snapTestNormal(changed) == snapTestNormal(before) {
		t.Fatal("the changes left the snapshot as it was")
	}
	for round := 1; round <= 2; round++ {
		start := time.Now()
		tp.host.must(t, func() error { return before.Restore(ctx) })
		t.Logf("Restore #%d took %v", round, time.Since(start).Round(time.Millisecond))
		var after *Snapshot
		tp.host.must(t, func() error {
			var err error
			after, err = TakeSnapshot(ctx, links)
			return err
		})
		if got, want := snapTestNormal(after), snapTestNormal(before); got != want {
			t.Errorf("after Restore #%d:\n%s\nwant:\n%s", round, got, want)
		}
	}
	if !tp.reachable() {
		t.Error("peer unreachable after Restore")
	}
}

// VLANs: one deleted, one made with another ID under the same name, one
// created; Restore recreates, replaces and deletes them.
func TestSnapshotRestoreIntegrationVLAN(t *testing.T) {
	testutil.RequireRoot(t, "creates network namespaces, veths and bridges")
	t.Parallel()
	tp := tryNewTopo(t)
	vlan := func(name string, id int) func() error {
		return func() error {
			return netlink.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: snapByName("up0").Attrs().Index}, VlanId: id})
		}
	}
	if err := tp.host.run(vlan("up0.10", 10)); err != nil {
		t.Skipf("this kernel cannot make VLAN links (no 8021q): %v", err)
	}
	links := []string{"up0", "up0.10", "up0.11", "up0.20"}
	tp.host.must(t, func() error {
		return snapTestDo(
			snapAddr("up0.10", "10.10.0.1/24", 0),
			snapUp("up0.10"),
			snapRouteAdd("up0.10", "10.20.0.0/16", "10.10.0.254", 0),
			vlan("up0.11", 11),
			snapMTU("up0.11", 1400),
			snapAddr("up0.11", "10.11.0.1/24", 0),
		)
	})
	var before *Snapshot
	tp.host.must(t, func() error {
		var err error
		before, err = TakeSnapshot(context.Background(), links)
		return err
	})
	if l := snapTestLink(before, "up0.10"); l == nil || l.Kind != "vlan" || l.VLAN == nil || *l.VLAN != (VLANSnapshot{Parent: "up0", ID: 10}) {
		t.Errorf("snapshot of up0.10: %+v", l)
	}
	tp.host.must(t, func() error {
		return snapTestDo(
			func() error { return netlink.LinkDel(snapByName("up0.10")) },
			func() error { return netlink.LinkDel(snapByName("up0.11")) },
			vlan("up0.11", 111),
			vlan("up0.20", 20),
			snapAddr("up0.20", "10.30.0.1/24", 0),
		)
	})
	snapTestRestoreTwice(t, tp, before, links)
}
