//go:build integration

package netcfg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// These tests change links only inside network namespaces they create:
// the test goroutine, locked to its thread, enters a fresh namespace and
// leaves it (which then disappears) at cleanup. Traffic stays between
// namespaces the test made.

// applyITEnter moves the calling goroutine, locked to its thread, into a
// new network namespace; leave goes back and drops it. A thread that
// cannot go back stays locked, so the runtime ends it with the goroutine.
func applyITEnter(t testing.TB) (leave func()) {
	t.Helper()
	testutil.RequireRoot(t, "creates network namespaces, bridges and veth pairs")
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Skipf("cannot create a network namespace: %v", err)
	}
	return func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("back to the original netns: %v (thread left locked)", err)
			return
		}
		ns.Close()
		orig.Close()
		runtime.UnlockOSThread()
	}
}

// applyITNS puts the test in a fresh network namespace until it ends.
func applyITNS(t *testing.T) {
	t.Helper()
	t.Cleanup(applyITEnter(t))
}

// applyITPeerNS makes a second namespace without leaving the current one.
func applyITPeerNS(t *testing.T) netns.NsHandle {
	t.Helper()
	type res struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan res)
	go func() {
		// This thread ends up in the new namespace and stays locked: the
		// runtime ends it when the goroutine returns.
		runtime.LockOSThread()
		ns, err := netns.New()
		ch <- res{ns, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("peer netns: %v", r.err)
	}
	t.Cleanup(func() { r.ns.Close() })
	return r.ns
}

// applyITIn runs f in namespace ns on a thread of its own.
func applyITIn(ns netns.NsHandle, f func() error) error {
	ch := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		if err := netns.Set(ns); err != nil {
			ch <- err
			return
		}
		ch <- f()
	}()
	return <-ch
}

func applyITMust(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// applyITVeth makes a veth pair in the current namespace, both ends up;
// with peerNS open, the peer end moves there.
func applyITVeth(t testing.TB, name, peer string, peerNS netns.NsHandle) {
	t.Helper()
	applyITMust(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}))
	l, err := netlink.LinkByName(name)
	applyITMust(t, err)
	applyITMust(t, netlink.LinkSetUp(l))
	p, err := netlink.LinkByName(peer)
	applyITMust(t, err)
	if peerNS.IsOpen() {
		applyITMust(t, netlink.LinkSetNsFd(p, int(peerNS)))
		applyITMust(t, applyITIn(peerNS, func() error {
			p, err := netlink.LinkByName(peer)
			if err != nil {
				return err
			}
			return netlink.LinkSetUp(p)
		}))
		return
	}
	applyITMust(t, netlink.LinkSetUp(p))
}

func applyITAddr(name, cidr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	return netlink.AddrAdd(l, a)
}

func applyITDefaultRoute(name, gw string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(gw), Protocol: unix.RTPROT_STATIC})
}

// applyITPing sends ICMP echo requests from the current namespace over a
// raw socket until one is answered or timeout passes.
func applyITPing(dst string, timeout time.Duration) error {
	c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return err
	}
	defer c.Close()
	id := uint16(os.Getpid())
	deadline := time.Now().Add(timeout)
	for seq := uint16(1); time.Now().Before(deadline); seq++ {
		msg := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'v', 'c'}
		binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break // timeout: send again
			}
			if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && from.String() == dst {
				return nil
			}
		}
	}
	return fmt.Errorf("ping %s: no reply in %v", dst, timeout)
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func applyITState(t testing.TB) *State {
	t.Helper()
	st, err := ReadState(context.Background())
	applyITMust(t, err)
	return st
}

// applyITComparable is a state without what a delete-and-recreate changes
// anyway (indexes) or what the kernel adds at its own pace (IPv6
// link-local routes, which depend on DAD and carrier).
func applyITComparable(st *State) string {
	links := slices.Clone(st.Links)
	for i := range links {
		links[i].Index = 0
	}
	slices.SortFunc(links, func(a, b Link) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, l := range links {
		fmt.Fprintf(&b, "%+v\n", l)
	}
	for _, r := range st.Routes {
		if r.Dst.Addr().IsLinkLocalUnicast() || r.Dst.Addr().IsMulticast() {
			continue
		}
		fmt.Fprintf(&b, "%+v\n", r)
	}
	return b.String()
}

func applyITApply(t testing.TB, layout paths.Layout, cfg *Config, opts ApplyOptions) *Result {
	t.Helper()
	res, err := Apply(context.Background(), testutil.Logger(t), layout, cfg, opts)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func applyITConfig(bridges []Bridge, vlans []VLAN, mgmt *Management) *Config {
	return &Config{APIVersion: APIVersion, Kind: Kind, Bridges: bridges, VLANs: vlans, Management: mgmt}
}

func applyITWantPrefixes(t *testing.T, st *State, link string, want ...string) {
	t.Helper()
	l := st.Link(link)
	if l == nil {
		t.Errorf("link %s: missing", link)
		return
	}
	var got []string
	for _, a := range l.Addresses {
		got = append(got, a.String())
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s addresses: got %q; want %q", link, got, want)
	}
}

func TestReadStateIntegration(t *testing.T) {
	applyITNS(t)
	applyITVeth(t, "p1", "p1x", netns.None())
	applyITMust(t, netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br9", MTU: 1400}}))
	h, err := openHandle()
	applyITMust(t, err)
	defer h.Close()
	applyITMust(t, h.setBridgeSTP("br9", true))
	applyITMust(t, setMaster(h, "p1", "br9"))
	applyITMust(t, setMTU(h, "br9", 1400))
	applyITMust(t, setUp(h, "br9", true))
	applyITMust(t, applyITAddr("br9", "10.9.0.1/24"))
	applyITMust(t, applyITAddr("br9", "fd00:9::1/64"))
	applyITMust(t, applyITDefaultRoute("br9", "10.9.0.254"))

	st := applyITState(t)
	br := st.Link("br9")
	if br == nil || br.Type != "bridge" || !br.STP || br.VLANFiltering || br.MTU != 1400 || !br.Up {
		t.Errorf("br9 = %+v; want an up bridge, STP on, MTU 1400", br)
	}
	if p := st.Link("p1"); p == nil || p.Type != "veth" || p.Master != "br9" || !p.Up {
		t.Errorf("p1 = %+v; want an up veth in br9", p)
	}
	applyITWantPrefixes(t, st, "br9", "10.9.0.1/24", "fd00:9::1/64") // no fe80::
	if got := st.DefaultRouteLinks(); !slices.Equal(got, []string{"br9"}) {
		t.Errorf("DefaultRouteLinks = %q; want [br9]; routes %+v", got, st.Routes)
	}
	applyITMust(t, h.setBridgeSTP("br9", false))
	if br := applyITState(t).Link("br9"); br.STP {
		t.Errorf("br9 STP still on after turning it off")
	}
}

func TestApplyIntegrationCreateModifyDelete(t *testing.T) {
	applyITNS(t)
	applyITVeth(t, "p1", "p1x", netns.None())
	applyITVeth(t, "p2", "p2x", netns.None())
	applyITMust(t, netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "theirs0"}}))
	layout := paths.New(t.TempDir())

	cfg1 := applyITConfig([]Bridge{
		{Name: "br0", Ports: []string{"p1"}, STP: true, MTU: 1400, Addresses: []string{"10.10.0.1/24", "fd00:10::1/64"}},
		{Name: "br1", Ports: []string{"p2"}, Addresses: []string{"10.11.0.1/24"}},
	}, nil, nil)
	res := applyITApply(t, layout, cfg1, ApplyOptions{})
	if !res.Changed || len(res.Steps) == 0 {
		t.Fatalf("first apply: %+v; want steps", res)
	}
	st := applyITState(t)
	if br := st.Link("br0"); br == nil || !br.STP || br.MTU != 1400 || !br.Up {
		t.Errorf("br0 = %+v; want up, STP on, MTU 1400", br)
	}
	if p := st.Link("p1"); p.Master != "br0" || p.MTU != 1500 {
		t.Errorf("p1 = %+v; want a port of br0 keeping MTU 1500", p)
	}
	if p := st.Link("p2"); p.Master != "br1" {
		t.Errorf("p2 = %+v; want a port of br1", p)
	}
	applyITWantPrefixes(t, st, "br0", "10.10.0.1/24", "fd00:10::1/64")
	applyITWantPrefixes(t, st, "br1", "10.11.0.1/24")
	if fi, err := os.Stat(AppliedFile(layout)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("applied.yaml: %v, %v; want mode 0600", fi, err)
	}

	if res := applyITApply(t, layout, cfg1, ApplyOptions{}); res.Changed || len(res.Steps) != 0 {
		t.Errorf("second apply: %q; want no steps", res.Steps)
	}

	// Modify br0, drop br1.
	cfg2 := applyITConfig([]Bridge{
		{Name: "br0", Ports: []string{"p1"}, STP: false, MTU: 9000, Addresses: []string{"10.10.0.2/24"}},
	}, nil, nil)
	res = applyITApply(t, layout, cfg2, ApplyOptions{})
	t.Logf("modify: %q", res.Steps)
	st = applyITState(t)
	if br := st.Link("br0"); br == nil || br.STP || br.MTU != 9000 {
		t.Errorf("br0 = %+v; want STP off, MTU 9000", br)
	}
	applyITWantPrefixes(t, st, "br0", "10.10.0.2/24")
	if st.Link("br1") != nil {
		t.Errorf("br1 still there after it left the file")
	}
	if p := st.Link("p2"); p == nil || p.Master != "" {
		t.Errorf("p2 = %+v; want released", p)
	}
	if res := applyITApply(t, layout, cfg2, ApplyOptions{}); len(res.Steps) != 0 {
		t.Errorf("re-apply after modify: %q; want no steps", res.Steps)
	}

	// Delete everything virtcon made, and only that.
	res = applyITApply(t, layout, applyITConfig(nil, nil, nil), ApplyOptions{})
	st = applyITState(t)
	if st.Link("br0") != nil {
		t.Errorf("br0 still there after an empty config: steps %q", res.Steps)
	}
	if st.Link("theirs0") == nil || st.Link("p1") == nil {
		t.Errorf("a link virtcon did not make is gone: %+v", st.Links)
	}
}

// applyITVLANSupport skips when the kernel cannot make 802.1Q links.
func applyITVLANSupport(t testing.TB, parent string) {
	t.Helper()
	p, err := netlink.LinkByName(parent)
	applyITMust(t, err)
	err = netlink.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe.4093", ParentIndex: p.Attrs().Index}, VlanId: 4093})
	if err != nil {
		t.Skipf("this kernel cannot make VLAN links (no 8021q): %v", err)
	}
	l, _ := netlink.LinkByName("probe.4093")
	applyITMust(t, netlink.LinkDel(l))
}

func TestApplyIntegrationVLANs(t *testing.T) {
	applyITNS(t)
	applyITVeth(t, "v0", "v0x", netns.None())
	applyITVLANSupport(t, "v0")
	layout := paths.New(t.TempDir())
	cfg := applyITConfig(
		[]Bridge{{Name: "br0", Ports: []string{"v0.200"}, Addresses: []string{"10.200.0.1/24"}}},
		[]VLAN{
			{Name: "v0.100", Link: "v0", ID: 100, MTU: 1400, Addresses: []string{"10.100.0.1/24"}},
			{Name: "v0.200", Link: "v0", ID: 200},
			{Name: "br0.7", Link: "br0", ID: 7, Addresses: []string{"10.7.0.1/24"}},
		}, nil)
	res := applyITApply(t, layout, cfg, ApplyOptions{})
	t.Logf("create: %q", res.Steps)
	st := applyITState(t)
	for _, want := range []Link{
		{Name: "v0.100", VLANID: 100, Parent: "v0", MTU: 1400},
		{Name: "v0.200", VLANID: 200, Parent: "v0", MTU: 1500},
		{Name: "br0.7", VLANID: 7, Parent: "br0", MTU: 1500},
	} {
		l := st.Link(want.Name)
		if l == nil || l.Type != "vlan" || l.VLANID != want.VLANID || l.Parent != want.Parent || l.MTU != want.MTU || !l.Up {
			t.Errorf("%s = %+v; want an up VLAN %d on %s, MTU %d", want.Name, l, want.VLANID, want.Parent, want.MTU)
		}
	}
	if l := st.Link("v0.200"); l.Master != "br0" {
		t.Errorf("v0.200 master %q; want br0", l.Master)
	}
	applyITWantPrefixes(t, st, "v0.100", "10.100.0.1/24")
	if res := applyITApply(t, layout, cfg, ApplyOptions{}); len(res.Steps) != 0 {
		t.Errorf("second apply: %q; want no steps", res.Steps)
	}

	// Change an id (recreate), drop a VLAN.
	cfg.VLANs = []VLAN{{Name: "v0.100", Link: "v0", ID: 101, Addresses: []string{"10.100.0.1/24"}}, {Name: "v0.200", Link: "v0", ID: 200}}
	res = applyITApply(t, layout, cfg, ApplyOptions{})
	t.Logf("modify: %q", res.Steps)
	st = applyITState(t)
	if l := st.Link("v0.100"); l == nil || l.VLANID != 101 || !l.Up {
		t.Errorf("v0.100 = %+v; want VLAN 101, up", l)
	}
	applyITWantPrefixes(t, st, "v0.100", "10.100.0.1/24")
	if st.Link("br0.7") != nil {
		t.Errorf("br0.7 still there after it left the file")
	}
	if res := applyITApply(t, layout, cfg, ApplyOptions{}); len(res.Steps) != 0 {
		t.Errorf("re-apply after modify: %q; want no steps", res.Steps)
	}
	applyITApply(t, layout, applyITConfig(nil, nil, nil), ApplyOptions{})
	for _, n := range []string{"br0", "v0.100", "v0.200"} {
		if applyITState(t).Link(n) != nil {
			t.Errorf("%s still there after an empty config", n)
		}
	}
}

// applyITUplink builds a host with an uplink veth "up0" carrying
// 192.0.2.10/24 and the default route via 192.0.2.1, a router in a peer
// namespace that also answers on 198.51.100.1 (reached only by the
// default route).
func applyITUplink(t *testing.T) {
	t.Helper()
	peer := applyITPeerNS(t)
	applyITVeth(t, "up0", "lan0", peer)
	applyITMust(t, applyITIn(peer, func() error {
		if err := applyITAddr("lan0", "192.0.2.1/24"); err != nil {
			return err
		}
		return applyITAddr("lan0", "198.51.100.1/32")
	}))
	applyITMust(t, applyITAddr("up0", "192.0.2.10/24"))
	applyITMust(t, applyITDefaultRoute("up0", "192.0.2.1"))
	applyITMust(t, applyITPing("198.51.100.1", 3*time.Second))
}

func TestApplyIntegrationUplinkKeepsConnectivity(t *testing.T) {
	applyITNS(t)
	applyITUplink(t)
	layout := paths.New(t.TempDir())
	cfg := applyITConfig(
		[]Bridge{{Name: "br0", Ports: []string{"up0"}}},
		nil,
		&Management{Interface: "br0", Addresses: []string{"192.0.2.10/24"}, Gateway: "192.0.2.1"})

	before := applyITComparable(applyITState(t))
	_, err := Apply(context.Background(), testutil.Logger(t), layout, cfg, ApplyOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bridges[0].ports[0]") || !strings.Contains(err.Error(), `"up0"`) {
		t.Fatalf("Apply without AllowDefaultRouteChange = %v; want the default-route refusal naming bridges[0].ports[0] \"up0\"", err)
	}
	if after := applyITComparable(applyITState(t)); after != before {
		t.Fatalf("a refused apply changed the host:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(AppliedFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused apply recorded the config: %v", err)
	}

	res := applyITApply(t, layout, cfg, ApplyOptions{AllowDefaultRouteChange: true})
	t.Logf("steps: %q", res.Steps)
	if !slices.ContainsFunc(res.Steps, func(s string) bool { return strings.Contains(s, "moving 192.0.2.10/24, route default via 192.0.2.1") }) {
		t.Errorf("steps %q; want one moving the address and default route", res.Steps)
	}
	st := applyITState(t)
	if got := st.DefaultRouteLinks(); !slices.Equal(got, []string{"br0"}) {
		t.Errorf("default route on %q; want br0", got)
	}
	if up := st.Link("up0"); up.Master != "br0" || len(up.Addresses) != 0 {
		t.Errorf("up0 = %+v; want a port of br0 without addresses", up)
	}
	applyITWantPrefixes(t, st, "br0", "192.0.2.10/24")
	if err := applyITPing("198.51.100.1", 5*time.Second); err != nil {
		t.Errorf("after enslaving the uplink: %v", err)
	}
	if res := applyITApply(t, layout, cfg, ApplyOptions{}); len(res.Steps) != 0 {
		t.Errorf("second apply: %q; want no steps", res.Steps)
	}

	// Deleting the bridge would take the default route with it: refused
	// without AllowDefaultRouteChange.
	before = applyITComparable(applyITState(t))
	_, err = Apply(context.Background(), testutil.Logger(t), layout, applyITConfig(nil, nil, nil), ApplyOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "default route") {
		t.Errorf("Apply(empty) = %v; want the default-route refusal", err)
	}
	if after := applyITComparable(applyITState(t)); after != before {
		t.Errorf("a refused apply changed the host:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestApplyIntegrationFailureReverts(t *testing.T) {
	applyITNS(t)
	applyITUplink(t)
	applyITVeth(t, "p1", "p1x", netns.None())
	applyITVeth(t, "p2", "p2x", netns.None())
	applyITVeth(t, "p3", "p3x", netns.None())
	layout := paths.New(t.TempDir())
	prev := applyITConfig([]Bridge{
		{Name: "old0", Ports: []string{"p1"}, STP: true, Addresses: []string{"10.20.0.1/24"}},
		{Name: "mg0", Ports: []string{"p3"}, Addresses: []string{"10.50.0.1/24", "10.51.0.1/24"}},
	}, nil, nil)
	applyITApply(t, layout, prev, ApplyOptions{})
	// A route that needs 10.50.0.1/24, which the next config drops: the
	// kernel removes it with the address, and a revert must restore it.
	mg0, err := netlink.LinkByName("mg0")
	applyITMust(t, err)
	_, dst, _ := net.ParseCIDR("10.60.0.0/16")
	applyITMust(t, netlink.RouteAdd(&netlink.Route{LinkIndex: mg0.Attrs().Index, Dst: dst, Gw: net.ParseIP("10.50.0.254"), Src: net.ParseIP("10.50.0.1"), Protocol: unix.RTPROT_STATIC}))

	cfg := applyITConfig([]Bridge{
		{Name: "br0", Ports: []string{"up0"}, MTU: 1400, Addresses: []string{"10.30.0.1/24"}},
		{Name: "br1", Ports: []string{"p1", "p2"}, STP: true, Addresses: []string{"10.31.0.1/24"}},
		{Name: "mg0", Ports: []string{"p3"}, Addresses: []string{"10.51.0.1/24"}},
	}, nil, &Management{Interface: "br0", Gateway: "192.0.2.1"})
	plan, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{AllowDefaultRouteChange: true, DryRun: true})
	applyITMust(t, err)
	t.Logf("plan: %q", plan.Steps)
	if len(plan.Steps) < 6 {
		t.Fatalf("plan %q; want a longer one to cut", plan.Steps)
	}

	before := applyITComparable(applyITState(t))
	if !strings.Contains(before, "10.60.0.0/16") {
		t.Fatalf("state lacks the test route:\n%s", before)
	}
	applied, err := os.ReadFile(AppliedFile(layout))
	applyITMust(t, err)
	for i := range plan.Steps {
		boom := fmt.Errorf("injected failure after step %d", i+1)
		_, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{
			AllowDefaultRouteChange: true,
			afterStep: func(j int, _ string) error {
				if j == i {
					return boom
				}
				return nil
			},
		})
		var se *StepError
		if !errors.As(err, &se) || se.Index != i || !errors.Is(err, boom) || se.RevertErr != nil {
			t.Fatalf("cut after step %d: Apply = %v; want a reverted StepError at that step", i+1, err)
		}
		if after := applyITComparable(applyITState(t)); after != before {
			t.Fatalf("cut after step %d (%s): state not restored:\nbefore:\n%s\nafter:\n%s", i+1, plan.Steps[i], before, after)
		}
		if got, _ := os.ReadFile(AppliedFile(layout)); string(got) != string(applied) {
			t.Fatalf("cut after step %d: applied.yaml changed", i+1)
		}
	}
	if err := applyITPing("198.51.100.1", 3*time.Second); err != nil {
		t.Errorf("after the reverts: %v", err)
	}

	// A real failure, from the kernel: no IPv6 on a link with an MTU under
	// 1280, found only when the address step runs, after bridge steps.
	bad := applyITConfig([]Bridge{{Name: "br2", Ports: []string{"p2"}, MTU: 1000, Addresses: []string{"10.40.0.1/24", "fd00:40::1/64"}}}, nil, nil)
	bad.Bridges = append(bad.Bridges, prev.Bridges...)
	bad.Bridges[2].Addresses = bad.Bridges[2].Addresses[1:] // drops 10.50.0.1/24 too
	_, err = Apply(context.Background(), testutil.Logger(t), layout, bad, ApplyOptions{})
	var se *StepError
	if !errors.As(err, &se) || !strings.Contains(se.Step, "fd00:40::1/64") || se.RevertErr != nil {
		t.Fatalf("Apply(IPv6 on MTU 1000) = %v; want a reverted failure at the IPv6 address step", err)
	}
	t.Logf("kernel failure: %v", err)
	if after := applyITComparable(applyITState(t)); after != before {
		t.Fatalf("state not restored after a kernel failure:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// And it still applies for real.
	applyITApply(t, layout, cfg, ApplyOptions{AllowDefaultRouteChange: true})
	if err := applyITPing("198.51.100.1", 5*time.Second); err != nil {
		t.Errorf("after applying: %v", err)
	}
	if res := applyITApply(t, layout, cfg, ApplyOptions{}); len(res.Steps) != 0 {
		t.Errorf("second apply: %q; want no steps", res.Steps)
	}
}

func TestApplyIntegrationDryRun(t *testing.T) {
	applyITNS(t)
	applyITVeth(t, "p1", "p1x", netns.None())
	layout := paths.New(t.TempDir())
	before := applyITComparable(applyITState(t))
	res, err := Apply(context.Background(), nil, layout, applyITConfig([]Bridge{{Name: "br0", Ports: []string{"p1"}}}, nil, nil), ApplyOptions{DryRun: true})
	applyITMust(t, err)
	if !res.Changed || len(res.Steps) != 3 {
		t.Errorf("dry run: %+v; want 3 steps", res)
	}
	if after := applyITComparable(applyITState(t)); after != before {
		t.Errorf("a dry run changed the host")
	}
	if _, err := os.Stat(AppliedFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dry run recorded the config: %v", err)
	}
}

func TestApplyIntegrationRejectsBadConfig(t *testing.T) {
	applyITNS(t)
	layout := paths.New(t.TempDir())
	before := applyITComparable(applyITState(t))
	cfg := applyITConfig([]Bridge{{Name: "br0", Ports: []string{"nosuch0"}}}, []VLAN{{Name: "x", Link: "lo", ID: 5000}}, nil)
	_, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `bridges[0].ports[0]: no such interface`) || !strings.Contains(err.Error(), "vlans[0].id") {
		t.Errorf("Apply = %v; want both errors", err)
	}
	if after := applyITComparable(applyITState(t)); after != before {
		t.Errorf("an invalid config changed the host")
	}
}

// A dry run shows the plan that the default-route rule refuses, with the
// refusal the apply would get; nothing changes.
func TestApplyIntegrationDryRunShowsRefusedPlan(t *testing.T) {
	applyITNS(t)
	applyITUplink(t)
	layout := paths.New(t.TempDir())
	enslave := applyITConfig([]Bridge{{Name: "br0", Ports: []string{"up0"}}}, nil,
		&Management{Interface: "br0", Addresses: []string{"192.0.2.10/24"}, Gateway: "192.0.2.1"})
	before := applyITComparable(applyITState(t))
	res, err := Apply(context.Background(), testutil.Logger(t), layout, enslave, ApplyOptions{DryRun: true})
	var ve *ValidationError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || !slices.ContainsFunc(ve.Errs, func(fe *FieldError) bool {
		return fe.Field == "bridges[0].ports[0]" && errors.Is(fe, ErrPortCarriesDefaultRoute) && errors.Is(fe, ErrNeedsTry)
	}) {
		t.Errorf("dry run of enslaving the uplink: %v; want the default-route refusal of bridges[0].ports[0] (ErrNeedsTry)", err)
	}
	if res == nil || !slices.ContainsFunc(res.Steps, func(s string) bool { return strings.Contains(s, "moving 192.0.2.10/24, route default via 192.0.2.1") }) {
		t.Errorf("dry run plan %+v; want the steps, moving the address and default route", res)
	}
	// and through ApplyDesired, as `virt net apply --dry-run` calls it
	dres, _, derr := ApplyDesired(context.Background(), nil, layout, enslave, DesiredOptions{DryRun: true})
	if !errors.Is(derr, ErrInvalid) || dres == nil || len(dres.Steps) == 0 {
		t.Errorf("ApplyDesired dry run: %+v, %v; want the plan and the refusal", dres, derr)
	}
	if after := applyITComparable(applyITState(t)); after != before {
		t.Errorf("a dry run changed the host:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(AppliedFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dry run recorded the config: %v", err)
	}

	// The rule's other half, in the plan: deleting the bridge that now
	// carries the default route.
	applyITApply(t, layout, enslave, ApplyOptions{AllowDefaultRouteChange: true})
	applied, err := os.ReadFile(AppliedFile(layout))
	applyITMust(t, err)
	before = applyITComparable(applyITState(t))
	res, err = Apply(context.Background(), testutil.Logger(t), layout, applyITConfig(nil, nil, nil), ApplyOptions{DryRun: true})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "default route") {
		t.Errorf("dry run of deleting br0: %v; want the default-route refusal", err)
	}
	if res == nil || !slices.ContainsFunc(res.Steps, func(s string) bool { return strings.Contains(s, "br0") }) {
		t.Errorf("dry run plan %+v; want the steps deleting br0", res)
	}
	if after := applyITComparable(applyITState(t)); after != before {
		t.Errorf("a dry run changed the host:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got, _ := os.ReadFile(AppliedFile(layout)); string(got) != string(applied) {
		t.Errorf("a dry run changed applied.yaml")
	}
}

// The case: a plain apply while a try is pending is refused, so
// the try's rollback leaves no bridge that neither applied.yaml nor the
// desired file knows about.
func TestApplyIntegrationRefusedDuringTry(t *testing.T) {
	applyITNS(t)
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	ctx := context.Background()
	log := testutil.Logger(t)
	_, p, err := ApplyDesired(ctx, log, layout, applyITConfig([]Bridge{{Name: "brtry0"}}, nil, nil), DesiredOptions{Try: 30 * time.Second})
	applyITMust(t, err)
	_, _, err = ApplyDesired(ctx, log, layout, applyITConfig([]Bridge{{Name: "brtry0"}, {Name: "brplain0"}}, nil, nil), DesiredOptions{})
	var tp *TryPendingError
	if !errors.As(err, &tp) || tp.ID != p.ID {
		t.Fatalf("plain apply during try %s: %v; want a TryPendingError naming it", p.ID, err)
	}
	if applyITState(t).Link("brplain0") != nil {
		t.Fatal("the refused apply created brplain0")
	}
	applyITMust(t, RollbackDesired(ctx, layout))
	st := applyITState(t)
	for _, n := range []string{"brtry0", "brplain0"} {
		if st.Link(n) != nil {
			t.Errorf("%s still there after the rollback", n)
		}
	}
	if prev, err := LoadApplied(layout); err != nil || prev != nil {
		t.Errorf("applied record after the rollback: %+v, %v; want none, as before the try", prev, err)
	}
}

// AtLeast: a change that needs a longer trial than asked (a new STP
// bridge: 2 × its 15 s forward delay plus the margin) goes on the least
// it needs instead of being refused, and the result says why.
func TestApplyIntegrationAtLeastLengthensTheTry(t *testing.T) {
	applyITNS(t)
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	ctx := context.Background()
	log := testutil.Logger(t)
	cfg := applyITConfig([]Bridge{{Name: "brstp0", STP: true}}, nil, nil)
	if _, _, err := ApplyDesired(ctx, log, layout, cfg, DesiredOptions{Try: 10 * time.Second}); !errors.Is(err, ErrDeadlineTooShort) {
		t.Fatalf("without AtLeast: %v; want ErrDeadlineTooShort", err)
	}
	res, p, err := ApplyDesired(ctx, log, layout, cfg, DesiredOptions{Try: 10 * time.Second, AtLeast: true})
	applyITMust(t, err)
	if res.Lengthened == nil || res.Lengthened.Min != 35*time.Second || res.Lengthened.STP != 30*time.Second {
		t.Errorf("Lengthened = %+v; want Min 35s for STP 30s", res.Lengthened)
	}
	if got := p.Deadline.Sub(p.Started); got < 34*time.Second || got > 36*time.Second {
		t.Errorf("the try runs %v; want the 35s the change needs", got)
	}
	applyITMust(t, RollbackDesired(ctx, layout))
	if applyITState(t).Link("brstp0") != nil {
		t.Error("brstp0 still there after the rollback")
	}
}
