//go:build integration

package netcfg

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/paths"
)

// The DHCP client that Apply starts re-executes this test binary.
func init() { testChildMains[DHCPClientEnv] = MaybeRunDHCPClient }

// dhcpITClients lists the live DHCP clients whose lease file is under root.
func dhcpITClients(root string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte(dhcpLeaseEnv+"="+root+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestDHCPClientIntegration(t *testing.T) {
	natRequire(t)
	dnsmasq, err := dnsmasqBinary()
	if err != nil {
		t.Skipf("needs dnsmasq as the test's DHCP server: %v", err)
	}
	const link, peer = "vcdhcp0", "vcdhcp0s"
	layout := paths.New(t.TempDir())
	t.Cleanup(func() {
		for _, pid := range dhcpITClients(layout.Root) {
			t.Errorf("dhcp client %d left running; killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	host, server := newTestNS(t), newTestNS(t)
	host.must(t, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: peer}); err != nil {
			return err
		}
		p, err := netlink.LinkByName(peer)
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(p, int(server.h))
	})
	server.must(t, func() error { return natLinkUp(peer, "10.66.0.1/24") })

	// The DHCP server: dnsmasq, DHCP only, in the server namespace.
	dir := t.TempDir()
	var srv *exec.Cmd
	server.must(t, func() error {
		srv = exec.Command(dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--user=root",
			"--port=0", "--bind-interfaces", "--interface="+peer, "--except-interface=lo",
			"--dhcp-range=10.66.0.50,10.66.0.99,255.255.255.0,2m",
			"--dhcp-option=option:router,10.66.0.1", "--dhcp-authoritative",
			"--dhcp-leasefile="+filepath.Join(dir, "leases"), "--pid-file="+filepath.Join(dir, "pid"),
			"--log-facility=-", "--log-dhcp")
		srv.Stdout, srv.Stderr = natTestWriter{t}, natTestWriter{t}
		return srv.Start()
	})
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	log := natTestLog(t)
	apply := func(cfg *Config) *Result {
		t.Helper()
		var res *Result
		start := time.Now()
		host.must(t, func() error {
			var err error
			res, err = Apply(context.Background(), log, layout, cfg, ApplyOptions{})
			return err
		})
		t.Logf("apply: %d steps %q in %s", len(res.Steps), res.Steps, time.Since(start).Round(time.Millisecond))
		return res
	}
	// Cleanup in the host namespace even if an assertion fails midway.
	t.Cleanup(func() {
		_ = host.run(func() error { _, err := stopDHCPClient(layout, link); return err })
	})

	cfg := &Config{APIVersion: APIVersion, Kind: Kind, Management: &Management{Interface: link, DHCP: true}}
	if dry := func() *Result {
		var res *Result
		host.must(t, func() error {
			var err error
			res, err = Apply(context.Background(), log, layout, cfg, ApplyOptions{DryRun: true})
			return err
		})
		return res
	}(); !slices.Contains(dry.Steps, "start DHCP client on "+link) {
		t.Errorf("dry run: got steps %q; want one to start the DHCP client", dry.Steps)
	}
	if pids := dhcpITClients(layout.Root); len(pids) != 0 {
		t.Fatalf("dry run started DHCP clients %v", pids)
	}

	res := apply(cfg)
	if !slices.Contains(res.Steps, "start DHCP client on "+link) {
		t.Errorf("first apply: got steps %q; want one to start the DHCP client", res.Steps)
	}
	pids := dhcpITClients(layout.Root)
	if len(pids) != 1 {
		t.Fatalf("dhcp clients: got %v; want one", pids)
	}
	lease, err := ReadDHCPLease(layout, link)
	if err != nil || lease == nil {
		t.Fatalf("lease file: got %v, %v; want a lease", lease, err)
	}
	lo, hi := netip.MustParseAddr("10.66.0.50"), netip.MustParseAddr("10.66.0.99")
	if a := lease.Address.Addr(); lease.Address.Bits() != 24 || a.Less(lo) || hi.Less(a) {
		t.Errorf("lease address: got %s; want 10.66.0.50-99/24", lease.Address)
	}
	if lease.Router != netip.MustParseAddr("10.66.0.1") || lease.LeaseTime != 120 {
		t.Errorf("lease: got router %s, %d s; want 10.66.0.1, 120 s", lease.Router, lease.LeaseTime)
	}
	if st, err := os.Stat(dhcpFilesFor(layout, link).lease); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lease file: got %v, %v; want mode 0600", st, err)
	}
	h := host.handle(t)
	hasAddr := func() bool {
		l, err := h.LinkByName(link)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == lease.Address.String() })
	}
	hasRoute := func() bool {
		routes, err := h.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(routes, func(r netlink.Route) bool {
			return (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(net.IPv4(10, 66, 0, 1)) && r.Protocol == unix.RTPROT_DHCP
		})
	}
	if !hasAddr() {
		t.Errorf("address %s not on %s", lease.Address, link)
	}
	if !hasRoute() {
		t.Errorf("no default route via 10.66.0.1")
	}

	if res := apply(cfg); len(res.Steps) != 0 || res.Changed {
		t.Errorf("second apply: got %q, changed %v; want no steps", res.Steps, res.Changed)
	}
	if got := dhcpITClients(layout.Root); !slices.Equal(got, pids) {
		t.Errorf("dhcp clients after second apply: got %v; want %v", got, pids)
	}

	// A client that died is started again by the next apply.
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); len(dhcpITClients(layout.Root)) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if res := apply(cfg); !slices.Contains(res.Steps, "start DHCP client on "+link) {
		t.Errorf("apply after the client died: got %q; want it started again", res.Steps)
	}
	if lease, err = ReadDHCPLease(layout, link); err != nil || lease == nil {
		t.Fatalf("lease after restart: got %v, %v", lease, err)
	}

	res = apply(&Config{APIVersion: APIVersion, Kind: Kind})
	if !slices.Contains(res.Steps, "stop DHCP client on "+link) {
		t.Errorf("apply without management: got %q; want the DHCP client stopped", res.Steps)
	}
	if got := dhcpITClients(layout.Root); len(got) != 0 {
		t.Errorf("dhcp clients after removing management: got %v; want none", got)
	}
	if hasAddr() {
		t.Errorf("address %s still on %s after the client stopped", lease.Address, link)
	}
	if hasRoute() {
		t.Errorf("default route via 10.66.0.1 still there after the client stopped")
	}
	if l, err := ReadDHCPLease(layout, link); l != nil || err != nil {
		t.Errorf("lease file after stop: got %v, %v; want none", l, err)
	}
}
