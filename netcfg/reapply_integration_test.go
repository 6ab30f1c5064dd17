//go:build integration

package netcfg

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// A host that lost its network (a reboot: links, nftables rules, dnsmasq
// and the runtime directory gone) gets the applied configuration back
// from Reapply, and a second Reapply runs no step.
func TestReapplyIntegration(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	n := Network{Name: "rb", Type: "nat", Bridge: "vcbr-rb", Subnet: "10.79.0.0/24"}
	natCleanup(t, ns, layout, n)
	// nic0 stands for a NIC: it is there again after the reboot. A VLAN on
	// it is part of the test where the kernel has 8021q.
	vlan := false
	ns.must(t, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nic0"}, PeerName: "nic0p"}); err != nil {
			return err
		}
		p, _ := netlink.LinkByName("nic0")
		probe := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe.4093", ParentIndex: p.Attrs().Index}, VlanId: 4093}
		if err := netlink.LinkAdd(probe); err != nil {
			t.Logf("no VLAN in this test: the kernel cannot make VLAN links (no 8021q): %v", err)
			return nil
		}
		vlan = true
		return netlink.LinkDel(probe)
	})
	doc := "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vcrb0\n    ports: [nic0]\n    addresses: [10.66.0.1/24]\n"
	links := []string{"vcrb0"}
	if vlan {
		doc = "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vcrb0\n    ports: [nic0.10]\n    addresses: [10.66.0.1/24]\n" +
			"vlans:\n  - name: nic0.10\n    link: nic0\n    id: 10\n"
		links = append(links, "nic0.10")
	}
	doc += "networks:\n  - name: rb\n    type: nat\n    bridge: vcbr-rb\n    subnet: 10.79.0.0/24\n"
	cfg, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ns.must(t, func() error { _, err := Apply(ctx, log, layout, cfg, ApplyOptions{}); return err })
	want := natReadState(t, ns, layout, n)

	// the reboot
	ns.must(t, func() error {
		if pid, ok := dnsmasqRunning(natFilesFor(layout, n.Name)); ok {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return err
			}
			for i := 0; i < 100 && dnsmasqIsOurs(pid, natFilesFor(layout, n.Name)); i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		for _, name := range append(links, "vcbr-rb") {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkDel(l); err != nil {
				return err
			}
		}
		return os.RemoveAll(layout.RunDir())
	})
	c := ns.nft(t)
	c.DelTable(nftTable())
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := natReadState(t, ns, layout, n); st.bridge != 0 || len(st.pids) != 0 || len(st.rules) != 0 {
		t.Fatalf("the simulated reboot left %s", st)
	}

	s := NewService(layout, log)
	var res *Result
	ns.must(t, func() error { res, err = s.Reapply(ctx); return err })
	t.Logf("reapply: %q", res.Steps)
	if !res.Changed || !slices.Contains(res.Steps, "restore nat network rb (bridge vcbr-rb, nftables chains, dnsmasq)") {
		t.Errorf("reapply steps %q; want the NAT network restored among them", res.Steps)
	}
	for _, l := range links {
		if !slices.ContainsFunc(res.Steps, func(s string) bool { return strings.Contains(s, l) }) {
			t.Errorf("reapply steps %q name nothing of %s", res.Steps, l)
		}
	}
	got := natReadState(t, ns, layout, n)
	if len(got.pids) != 1 || got.pidfile != got.pids[0] || !got.up || !slices.Equal(got.addrs, want.addrs) || len(got.rules) != len(want.rules) {
		t.Errorf("after reapply: %s\nwant like before the reboot: %s", got, want)
	}
	ns.must(t, func() error {
		st, err := ReadState(ctx)
		if err != nil {
			return err
		}
		if br := st.Link("vcrb0"); br == nil || !slices.Contains(br.Addresses, netip.MustParsePrefix("10.66.0.1/24")) {
			t.Errorf("vcrb0 = %+v; want it back with 10.66.0.1/24", br)
		}
		if v := st.Link("nic0.10"); vlan && (v == nil || v.VLANID != 10 || v.Master != "vcrb0") {
			t.Errorf("nic0.10 = %+v; want VLAN 10 on nic0, a port of vcrb0", v)
		}
		if p := st.Link("nic0"); !vlan && (p == nil || p.Master != "vcrb0") {
			t.Errorf("nic0 = %+v; want it a port of vcrb0 again", p)
		}
		return nil
	})

	ns.must(t, func() error { res, err = s.Reapply(ctx); return err })
	if res.Changed || len(res.Steps) != 0 {
		t.Errorf("second reapply: changed %v, steps %q; want none", res.Changed, res.Steps)
	}
	if again := natReadState(t, ns, layout, n); again.String() != got.String() {
		t.Errorf("second reapply changed the NAT network:\n  %s\nto\n  %s", got, again)
	}
}
