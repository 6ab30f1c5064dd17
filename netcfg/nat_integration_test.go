//go:build integration

package netcfg

// Every test here makes its own network namespaces (unnamed: they vanish
// with their last reference) and runs the code under test on a thread
// locked into them, so the host's interfaces and ruleset are never touched.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// natRequire skips the test, saying why, unless it can run.
func natRequire(t *testing.T, bins ...string) {
	t.Helper()
	testutil.RequireRoot(t, "creates network namespaces, bridges and nftables rules")
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			t.Skipf("needs %s: %v", b, err)
		}
	}
}

func (ns *testNS) handle(t *testing.T) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns.h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func (ns *testNS) nft(t *testing.T) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.h)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// natTestProcs lists the processes whose command line mentions root (only
// the dnsmasqs this test started can).
func natTestProcs(root string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte(root+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// natSetup makes a namespace and a layout, and cleans both up: RemoveNAT
// of every network named, then a kill of anything left that this test's
// root shows it started.
func natSetup(t *testing.T) (context.Context, *slog.Logger, *testNS, paths.Layout) {
	t.Helper()
	natRequire(t, "/dev/net/tun")
	if _, err := dnsmasqBinary(); err != nil {
		t.Skipf("needs dnsmasq: %v", err)
	}
	layout := paths.New(t.TempDir())
	t.Cleanup(func() {
		for _, pid := range natTestProcs(layout.Root) {
			t.Errorf("process %d left running; killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	ns := newTestNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, testutil.Logger(t), ns, layout
}

func natCleanup(t *testing.T, ns *testNS, layout paths.Layout, n Network) {
	t.Cleanup(func() {
		err := ns.run(func() error {
			return RemoveNAT(context.Background(), slog.New(slog.DiscardHandler), layout, n.Name, n.Bridge)
		})
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// natState is what EnsureNAT leaves behind, for comparisons.
type natState struct {
	pids       []int // dnsmasq processes of this network
	pidfile    int
	bridge     int // ifindex
	up         bool
	addrs      []string
	forwarding string
	rules      map[string][]string // chain -> "handle comment"
}

func natReadState(t *testing.T, ns *testNS, layout paths.Layout, n Network) natState {
	t.Helper()
	files := natFilesFor(layout, n.Name)
	var st natState
	for _, pid := range natTestProcs(layout.Root) {
		if dnsmasqIsOurs(pid, files) {
			st.pids = append(st.pids, pid)
		}
	}
	st.pidfile, _ = dnsmasqRunning(files)
	h := ns.handle(t)
	if br, err := h.LinkByName(n.Bridge); err == nil {
		st.bridge = br.Attrs().Index
		st.up = br.Attrs().Flags&net.FlagUp != 0
		addrs, err := h.AddrList(br, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			st.addrs = append(st.addrs, a.IPNet.String())
		}
	}
	ns.must(t, func() error {
		b, err := os.ReadFile(natForwardingSysctl)
		st.forwarding = strings.TrimSpace(string(b))
		return err
	})
	c := ns.nft(t)
	st.rules = map[string][]string{}
	chains, err := nftOurChains(c)
	if err != nil {
		t.Fatal(err)
	}
	for name := range chains {
		rules, err := c.GetRules(nftTable(), &nftables.Chain{Name: name, Table: nftTable()})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			st.rules[name] = append(st.rules[name], fmt.Sprintf("%d %s", r.Handle, nftComment(r)))
		}
	}
	return st
}

func (s natState) String() string {
	return fmt.Sprintf("dnsmasq %v (pidfile %d), bridge #%d up=%t %v, ip_forward=%s, rules %v",
		s.pids, s.pidfile, s.bridge, s.up, s.addrs, s.forwarding, s.rules)
}

func TestNATEnsureIdempotent(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	n := Network{Name: "idem", Type: "nat", Bridge: "vcbr-idem", Subnet: "10.77.0.0/24"}
	natCleanup(t, ns, layout, n)

	ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	first := natReadState(t, ns, layout, n)
	ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	second := natReadState(t, ns, layout, n)

	if first.String() != second.String() {
		t.Errorf("second EnsureNAT changed the state:\n  %s\nto\n  %s", first, second)
	}
	if len(second.pids) != 1 || second.pids[0] != second.pidfile {
		t.Errorf("dnsmasq processes %v, pidfile %d; want exactly the one in the pidfile", second.pids, second.pidfile)
	}
	if !second.up || !slices.Equal(second.addrs, []string{"10.77.0.1/24"}) {
		t.Errorf("bridge up=%t addresses %v; want up with [10.77.0.1/24]", second.up, second.addrs)
	}
	if second.forwarding != "1" {
		t.Errorf("ip_forward = %q; want 1", second.forwarding)
	}
	if len(second.rules["nat-idem"]) != 1 || len(second.rules["fwd-idem"]) != 2 || len(second.rules) != 2 {
		t.Errorf("rules %v; want 1 in nat-idem and 2 in fwd-idem", second.rules)
	}
	if conf, err := os.Stat(natFilesFor(layout, n.Name).conf); err != nil {
		t.Error(err)
	} else if conf.Mode().Perm() != 0o600 {
		t.Errorf("conf file mode %v; want 0600", conf.Mode().Perm())
	}
}

func TestNATDnsmasqDetached(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	n := Network{Name: "detached", Type: "nat", Bridge: "vcbr-det", Subnet: "10.77.1.0/24"}
	natCleanup(t, ns, layout, n)

	// run's goroutine exits, and with it its (locked) thread.
	ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	time.Sleep(200 * time.Millisecond)

	pid, ok := dnsmasqRunning(natFilesFor(layout, n.Name))
	if !ok {
		t.Fatal("dnsmasq is gone after the goroutine that started it exited")
	}
	sid, err := unix.Getsid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if mine, _ := unix.Getsid(0); sid == mine {
		t.Errorf("dnsmasq shares our session %d; want its own", sid)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if ppid, _ := strconv.Atoi(fields[1]); ppid == os.Getpid() {
		t.Errorf("dnsmasq's parent is the test process; want it reparented (daemonised)")
	}
	var inNS, want unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &inNS); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(ns.h), &want); err != nil {
		t.Fatal(err)
	}
	if inNS.Ino != want.Ino {
		t.Errorf("dnsmasq runs in netns inode %d; want the test's %d", inNS.Ino, want.Ino)
	}
}

// TestNATClientLease: a client namespace on the bridge gets a lease by
// busybox udhcpc, reaches the bridge by ICMP, and reaches an "upstream"
// namespace masqueraded behind the NAT namespace's address.
func TestNATClientLease(t *testing.T) {
	natRequire(t, "/bin/busybox")
	ctx, log, srv, layout := natSetup(t)
	cli := newTestNS(t)
	up := newTestNS(t)
	n := Network{Name: "lease", Type: "nat", Bridge: "vcbr-lease", Subnet: "10.77.2.0/24"}
	natCleanup(t, srv, layout, n)
	srv.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })

	// client <-veth-> bridge; server <-veth-> upstream (192.0.2.0/24).
	srv.must(t, func() error {
		br, err := netlink.LinkByName(n.Bridge)
		if err != nil {
			return err
		}
		port := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vh0", MasterIndex: br.Attrs().Index},
			PeerName: "vg0", PeerNamespace: netlink.NsFd(int(cli.h))}
		if err := netlink.LinkAdd(port); err != nil {
			return fmt.Errorf("veth to client: %w", err)
		}
		upl := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vu0"}, PeerName: "vu1", PeerNamespace: netlink.NsFd(int(up.h))}
		if err := netlink.LinkAdd(upl); err != nil {
			return fmt.Errorf("veth to upstream: %w", err)
		}
		return natLinkUp("vu0", "192.0.2.1/24", "vh0")
	})
	up.must(t, func() error { return natLinkUp("vu1", "192.0.2.2/24") })
	cli.must(t, func() error { return natLinkUp("vg0", "") })

	script := filepath.Join(t.TempDir(), "udhcpc.sh")
	err := os.WriteFile(script, []byte(`#!/bin/busybox sh
case "$1" in
bound|renew)
	/bin/busybox ip addr add "$ip/$mask" dev "$interface"
	[ -n "$router" ] && /bin/busybox ip route add default via "${router%% *}" dev "$interface"
	;;
esac
exit 0
`), 0o700)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cli.must(t, func() error {
		cmd := exec.CommandContext(ctx, "/bin/busybox", "udhcpc", "-i", "vg0", "-n", "-q", "-t", "5", "-T", "1", "-s", script)
		out, err := cmd.CombinedOutput()
		t.Logf("udhcpc (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			return fmt.Errorf("udhcpc: %w", err)
		}
		return nil
	})

	ch := cli.handle(t)
	vg0, err := ch.LinkByName("vg0")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ch.AddrList(vg0, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 {
		t.Fatalf("client addresses %v, %v; want one", addrs, err)
	}
	got, _ := natAddrPrefix(addrs[0].IPNet)
	lo, hi := natDHCPRange(netip.MustParsePrefix(n.Subnet))
	if got.Bits() != 24 || got.Addr().Less(lo) || hi.Less(got.Addr()) {
		t.Errorf("client got %s; want an address in %s-%s/24", got, lo, hi)
	}

	var leases []Lease
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if leases, err = NATLeases(layout, n.Name); err != nil {
			t.Fatal(err)
		}
		if len(leases) > 0 {
			break
		}
	}
	if len(leases) != 1 || leases[0].IP != got.Addr() || leases[0].MAC != vg0.Attrs().HardwareAddr.String() {
		t.Errorf("leases %+v; want one for %s %s", leases, vg0.Attrs().HardwareAddr, got.Addr())
	} else if d := time.Until(leases[0].Expiry); d < 11*time.Hour || d > 13*time.Hour {
		t.Errorf("lease expires in %v; want about 12h", d)
	}

	if b, err := os.ReadFile(natFilesFor(layout, n.Name).log); err != nil || !bytes.Contains(b, []byte("DHCPACK(vcbr-lease) "+got.Addr().String())) {
		t.Errorf("dnsmasq log (%v):\n%s\nwant the DHCPACK for %s", err, b, got.Addr())
	}

	cli.must(t, func() error { return natPing(netip.MustParseAddr("10.77.2.1"), 3*time.Second) })

	// Masquerading: upstream sees the NAT namespace's address, and the
	// reply finds its way back through conntrack.
	var conn *net.UDPConn
	up.must(t, func() error {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 9999})
		return err
	})
	defer conn.Close()
	seen := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			seen <- err.Error()
			return
		}
		seen <- from.IP.String()
		_, _ = conn.WriteToUDP(buf[:n], from)
	}()
	cli.must(t, func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 9999})
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("virtcon")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "virtcon" {
			return fmt.Errorf("no echo through the NAT: %q, %v", buf[:n], err)
		}
		return nil
	})
	if from := <-seen; from != "192.0.2.1" {
		t.Errorf("upstream saw the client as %s; want 192.0.2.1 (masqueraded)", from)
	}

	natCheckMasqRule(t, srv, n)
}

// natCheckMasqRule reads the nat chain back and looks for "ip saddr SUBNET
// ... masquerade".
func natCheckMasqRule(t *testing.T, ns *testNS, n Network) {
	t.Helper()
	natChain, _ := nftChains(n.Name)
	rules, err := ns.nft(t).GetRules(nftTable(), natChain)
	if err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix(n.Subnet)
	net4 := subnet.Addr().As4()
	found := false
	for _, r := range rules {
		var saddr, masq bool
		for i, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Payload:
				if e.Offset == 12 && e.Len == 4 && i+2 < len(r.Exprs) {
					bw, ok1 := r.Exprs[i+1].(*expr.Bitwise)
					cmp, ok2 := r.Exprs[i+2].(*expr.Cmp)
					saddr = ok1 && ok2 && cmp.Op == expr.CmpOpEq && bytes.Equal(cmp.Data, net4[:]) &&
						binary.BigEndian.Uint32(bw.Mask) == ^uint32(0)<<(32-subnet.Bits())
				}
			case *expr.Masq:
				masq = true
			}
		}
		if saddr && masq && nftComment(r) == "virtcon nat "+n.Name+": masquerade "+n.Subnet {
			found = true
		}
	}
	if !found {
		t.Errorf("no masquerade rule for %s in %s among %d rules", n.Subnet, natChain.Name, len(rules))
	}
}

// natLinkUp sets links up, giving the first an address when addr is set.
func natLinkUp(name, addr string, more ...string) error {
	for i, n := range append([]string{name}, more...) {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if i == 0 && addr != "" {
			a, err := netlink.ParseAddr(addr)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(l, a); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// natPing sends one ICMP echo request from the calling thread's namespace
// and waits for the reply.
func natPing(dst netip.Addr, timeout time.Duration) error {
	c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return err
	}
	defer c.Close()
	id := uint16(os.Getpid())
	msg := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), 0, 1, 'v', 'c'}
	var sum uint32
	for i := 0; i+1 < len(msg); i += 2 {
		sum += uint32(msg[i])<<8 | uint32(msg[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(msg[2:], ^uint16(sum))
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("ping %s: %w", dst, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("ping %s: %w", dst, err)
		}
		if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && from.String() == dst.String() {
			return nil
		}
	}
}

func TestNATRemove(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	a := Network{Name: "rm-a", Type: "nat", Bridge: "vcbr-rma", Subnet: "10.77.3.0/24"}
	b := Network{Name: "rm-b", Type: "nat", Bridge: "vcbr-rmb", Subnet: "10.77.4.0/24"}
	natCleanup(t, ns, layout, a)
	natCleanup(t, ns, layout, b)
	for _, n := range []Network{a, b} {
		ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	}

	ns.must(t, func() error { return RemoveNAT(ctx, log, layout, a.Name, a.Bridge) })
	sa, sb := natReadState(t, ns, layout, a), natReadState(t, ns, layout, b)
	if len(sa.pids) != 0 || sa.bridge != 0 || len(sa.rules["nat-rm-a"])+len(sa.rules["fwd-rm-a"]) != 0 {
		t.Errorf("after RemoveNAT(a): %s; want no dnsmasq, bridge or chains of a", sa)
	}
	if len(sb.pids) != 1 || sb.bridge == 0 || len(sb.rules) != 2 {
		t.Errorf("RemoveNAT(a) disturbed b: %s", sb)
	}
	if _, err := os.Stat(natFilesFor(layout, a.Name).runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime dir of a: %v; want it gone", err)
	}

	for i := 0; i < 2; i++ { // the second time: nothing left to remove, no error
		ns.must(t, func() error { return RemoveNAT(ctx, log, layout, b.Name, b.Bridge) })
	}
	if pids := natTestProcs(layout.Root); len(pids) != 0 {
		t.Errorf("processes left: %v", pids)
	}
	tables, err := ns.nft(t).ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 0 {
		t.Errorf("%d inet tables left; want the virtcon table gone", len(tables))
	}
	links, err := ns.handle(t).LinkList()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 { // lo
		t.Errorf("%d links left; want only lo", len(links))
	}
}

func TestNATRestartsDnsmasq(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	n := Network{Name: "restart", Type: "nat", Bridge: "vcbr-rst", Subnet: "10.77.5.0/24"}
	natCleanup(t, ns, layout, n)
	files := natFilesFor(layout, n.Name)
	ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	pid1, ok := dnsmasqRunning(files)
	if !ok {
		t.Fatal("dnsmasq not running after EnsureNAT")
	}

	// Killed: the next EnsureNAT starts a new one.
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); dnsmasqIsOurs(pid1, files); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq %d survived SIGKILL", pid1)
		}
	}
	ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	pid2, ok := dnsmasqRunning(files)
	if !ok || pid2 == pid1 {
		t.Fatalf("after a kill, EnsureNAT left dnsmasq pid %d running=%t; want a new one", pid2, ok)
	}

	// Reconfigured: the subnet moves, dnsmasq is restarted, the bridge
	// and the rules follow.
	n.Subnet = "10.77.6.0/24"
	ns.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	st := natReadState(t, ns, layout, n)
	if len(st.pids) != 1 || st.pids[0] == pid2 {
		t.Errorf("after a subnet change dnsmasq %v (old %d); want one new process", st.pids, pid2)
	}
	if !slices.Equal(st.addrs, []string{"10.77.6.1/24"}) {
		t.Errorf("bridge addresses %v; want only [10.77.6.1/24]", st.addrs)
	}
	conf, err := os.ReadFile(files.conf)
	if err != nil || !bytes.Contains(conf, []byte("dhcp-range=10.77.6.128,10.77.6.254,")) {
		t.Errorf("conf %s (%v); want the new range", conf, err)
	}
	if len(st.rules["nat-restart"]) != 1 {
		t.Errorf("nat rules %v; want exactly one", st.rules["nat-restart"])
	}
	natCheckMasqRule(t, ns, n)
}

func TestNATBridgeConflict(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	n := Network{Name: "conflict", Type: "nat", Bridge: "vcveth", Subnet: "10.77.7.0/24"}
	ns.must(t, func() error { // a veth: this kernel may lack the dummy driver
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vcveth"}, PeerName: "vcveth1"})
	})
	err := ns.run(func() error { return EnsureNAT(ctx, log, layout, n) })
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a bridge") {
		t.Errorf("EnsureNAT onto a veth = %v; want ErrInvalid, not a bridge", err)
	}
	st := natReadState(t, ns, layout, n)
	if len(st.pids) != 0 || len(st.rules) != 0 {
		t.Errorf("a refused EnsureNAT left %s", st)
	}
	err = ns.run(func() error { return RemoveNAT(ctx, log, layout, n.Name, n.Bridge) })
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("RemoveNAT of a veth = %v; want ErrInvalid (never deleted)", err)
	}
	if _, err := ns.handle(t).LinkByName("vcveth"); err != nil {
		t.Errorf("veth: %v; want it kept", err)
	}
}

// TestNATRevertsOnFailure: dnsmasq cannot start (the DHCP port is taken),
// so EnsureNAT fails and takes back the bridge and the rules it made.
func TestNATRevertsOnFailure(t *testing.T) {
	ctx, log, ns, layout := natSetup(t)
	n := Network{Name: "revert", Type: "nat", Bridge: "vcbr-rev", Subnet: "10.77.8.0/24"}
	natCleanup(t, ns, layout, n)
	var squatter *net.UDPConn
	ns.must(t, func() (err error) {
		squatter, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 67})
		return err
	})
	defer squatter.Close()

	err := ns.run(func() error { return EnsureNAT(ctx, log, layout, n) })
	if err == nil || !strings.Contains(err.Error(), "dnsmasq") {
		t.Fatalf("EnsureNAT with port 67 taken = %v; want a dnsmasq error", err)
	}
	t.Logf("EnsureNAT: %v", err)
	st := natReadState(t, ns, layout, n)
	if len(st.pids) != 0 || st.bridge != 0 || len(st.rules) != 0 {
		t.Errorf("a failed EnsureNAT left %s; want nothing", st)
	}
	tables, err := ns.nft(t).ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil || len(tables) != 0 {
		t.Errorf("inet tables %d, %v; want none", len(tables), err)
	}
}

// A NAT network serves DNS to its guests by default: dnsmasq answers on
// the bridge address (and nowhere else), forwarding to the host's
// resolvers, here a stand-in on a loopback address as systemd-resolved's
// 127.0.0.53; DHCP hands out the bridge address as the DNS server.
func TestNATServesDNS(t *testing.T) {
	natRequire(t, "/bin/busybox")
	ctx, log, srv, layout := natSetup(t)
	bin, _ := dnsmasqBinary()
	cli := newTestNS(t)
	n := Network{Name: "dns", Type: "nat", Bridge: "vcbr-dns", Subnet: "10.77.5.0/24"}
	gw := netip.MustParseAddr("10.77.5.1")

	// The host's resolver: answers for test.example only, on loopback.
	upstream := exec.Command(bin, "--keep-in-foreground", "--conf-file=/dev/null", "--bind-interfaces",
		"--listen-address=127.0.0.53", "--port=53", "--no-resolv", "--no-hosts", "--user=root",
		"--pid-file="+filepath.Join(layout.Root, "upstream.pid"), "--log-facility=-", "--log-queries=extra",
		"--address=/test.example/192.0.2.7")
	var upLog testutil.Buffer // written by exec's copier while the test reads it
	upstream.Stdout, upstream.Stderr = &upLog, &upLog
	srv.must(t, upstream.Start)
	t.Cleanup(func() {
		_ = upstream.Process.Kill()
		_ = upstream.Wait()
		t.Logf("upstream dnsmasq:\n%s", upLog.String())
	})
	resolv := filepath.Join(layout.Root, "etc", "resolv.conf")
	if err := os.MkdirAll(filepath.Dir(resolv), 0o755); err != nil {
		t.Fatal(err)
	}
	// dnsmasq reads it after dropping root, as /etc/resolv.conf is read:
	// the test's 0700 temporary directories must let it through
	for _, d := range []string{filepath.Dir(layout.Root), layout.Root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another interface of the host, where the NAT's dnsmasq must not
	// answer.
	other := netip.MustParseAddr("198.51.100.9")
	srv.must(t, func() error {
		// a veth pair: this kernel has no dummy links
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "other0"}, PeerName: "other1"}); err != nil {
			return err
		}
		return natLinkUp("other0", other.String()+"/32", "other1")
	})

	natCleanup(t, srv, layout, n)
	srv.must(t, func() error { return EnsureNAT(ctx, log, layout, n) })
	t.Cleanup(func() {
		if t.Failed() {
			conf, _ := os.ReadFile(natFilesFor(layout, n.Name).conf)
			b, _ := os.ReadFile(natFilesFor(layout, n.Name).log)
			t.Logf("nat dnsmasq conf:\n%s\nlog:\n%s", conf, b)
		}
	})
	srv.must(t, func() error {
		br, err := netlink.LinkByName(n.Bridge)
		if err != nil {
			return err
		}
		port := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vh1", MasterIndex: br.Attrs().Index},
			PeerName: "vg1", PeerNamespace: netlink.NsFd(int(cli.h))}
		if err := netlink.LinkAdd(port); err != nil {
			return err
		}
		return natLinkUp("vh1", "")
	})
	cli.must(t, func() error { return natLinkUp("vg1", "") })

	// DHCP: the lease names the bridge address as the DNS server.
	dir := t.TempDir()
	script := filepath.Join(dir, "udhcpc.sh")
	err := os.WriteFile(script, []byte(`#!/bin/busybox sh
case "$1" in
bound|renew)
	/bin/busybox ip addr add "$ip/$mask" dev "$interface"
	echo "$dns" > `+filepath.Join(dir, "dns")+`
	;;
esac
exit 0
`), 0o700)
	if err != nil {
		t.Fatal(err)
	}
	cli.must(t, func() error {
		out, err := exec.CommandContext(ctx, "/bin/busybox", "udhcpc", "-i", "vg1", "-n", "-q", "-t", "5", "-T", "1", "-s", script).CombinedOutput()
		if err != nil {
			return fmt.Errorf("udhcpc: %w\n%s", err, out)
		}
		return nil
	})
	if b, err := os.ReadFile(filepath.Join(dir, "dns")); err != nil || strings.TrimSpace(string(b)) != gw.String() {
		t.Errorf("DHCP DNS servers %q (%v); want the bridge address %s", b, err, gw)
	}

	// The guest resolves through the bridge address; the answer comes
	// from the host's resolver.
	var addrs []string
	cli.must(t, func() error {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rcode, got, err := dnsQuery(qctx, netip.AddrPortFrom(gw, 53), "probe.test.example.")
		if err != nil {
			return fmt.Errorf("query %s: %w", gw, err)
		}
		if rcode != 0 {
			return fmt.Errorf("query %s: rcode %v", gw, rcode)
		}
		addrs = got
		return nil
	})
	if !slices.Equal(addrs, []string{"192.0.2.7"}) {
		t.Errorf("probe.test.example via %s = %q; want [192.0.2.7] from the host's resolver", gw, addrs)
	}
	// the upstream's log reaches upLog through exec's copier: the answer
	// can come before the line does (failed so on a loaded CI machine)
	for wait := time.Now().Add(3 * time.Second); !strings.Contains(upLog.String(), "probe.test.example") && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(upLog.String(), "probe.test.example") {
		t.Errorf("the host's resolver was not asked for probe.test.example")
	}

	// Nowhere else: not on the host's other addresses.
	srv.must(t, func() error {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, _, err := dnsQuery(qctx, netip.AddrPortFrom(other, 53), "probe.test.example."); err == nil {
			return fmt.Errorf("a DNS server answers on %s, another interface of the host", other)
		}
		return nil
	})
}
