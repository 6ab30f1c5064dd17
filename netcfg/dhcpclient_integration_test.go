//go:build integration

package netcfg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

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

// dhcpITTopo is a host namespace whose link is a veth to peer in a
// server namespace, where dnsmasq hands out <net>.50-99/24 for 2 minutes
// with <net>.1 as the router. Any DHCP client left under the layout's
// root is an error, and killed.
func dhcpITTopo(t *testing.T, link, peer, net string) (*testNS, paths.Layout) {
	t.Helper()
	natRequire(t)
	dnsmasq, err := dnsmasqBinary()
	if err != nil {
		t.Skipf("needs dnsmasq as the test's DHCP server: %v", err)
	}
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
	server.must(t, func() error { return natLinkUp(peer, net+".1/24") })

	// The DHCP server: dnsmasq, DHCP only, in the server namespace.
	dir := t.TempDir()
	var srv *exec.Cmd
	server.must(t, func() error {
		srv = exec.Command(dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--user=root",
			"--port=0", "--bind-interfaces", "--interface="+peer, "--except-interface=lo",
			"--dhcp-range="+net+".50,"+net+".99,255.255.255.0,2m",
			"--dhcp-option=option:router,"+net+".1", "--dhcp-authoritative",
			"--dhcp-leasefile="+filepath.Join(dir, "leases"), "--pid-file="+filepath.Join(dir, "pid"),
			"--log-facility=-", "--log-dhcp")
		srv.Stdout, srv.Stderr = t.Output(), t.Output()
		return srv.Start()
	})
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	// Stop the client in the host namespace even if an assertion fails
	// midway (registered last: runs before the check above).
	t.Cleanup(func() {
		_ = host.run(func() error { _, err := stopDHCPClient(layout, link); return err })
	})
	return host, layout
}

func TestDHCPClientIntegration(t *testing.T) {
	const link, peer = "vcdhcp0", "vcdhcp0s"
	host, layout := dhcpITTopo(t, link, peer, "10.66.0")

	log := testutil.Logger(t)
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
	hasAddr := func() bool { return slices.Contains(dhcpITAddrs(t, h, link), lease.Address.String()) }
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

// A rolled-back try leaves the management DHCP client as it was: DHCP to
// static, rolled back by the watchdog at the deadline, gets its client
// (and a lease) back; static to DHCP, rolled back by `virt net rollback`,
// loses the client the try started.
func TestDHCPTryRollbackIntegration(t *testing.T) {
	const link, peer = "vcdhcp1", "vcdhcp1s"
	host, layout := dhcpITTopo(t, link, peer, "10.67.0")
	tryTestKillWatchdogs(t, PendingPath(layout))
	log := testutil.Logger(t)
	ctx := context.Background()
	dhcp := &Config{APIVersion: APIVersion, Kind: Kind, Management: &Management{Interface: link, DHCP: true}}
	static := &Config{APIVersion: APIVersion, Kind: Kind, Management: &Management{Interface: link, Addresses: []string{"10.67.0.10/24"}, Gateway: "10.67.0.1"}}
	h := host.handle(t)
	addrs := func() []string { t.Helper(); return dhcpITAddrs(t, h, link) }
	wantClient := func(when string, running bool) {
		t.Helper()
		pids := dhcpITClients(layout.Root)
		lease, err := ReadDHCPLease(layout, link)
		if err != nil {
			t.Fatal(err)
		}
		if !running {
			if len(pids) != 0 || lease != nil {
				t.Errorf("%s: dhcp clients %v, lease %+v; want none", when, pids, lease)
			}
			return
		}
		if len(pids) != 1 || lease == nil {
			t.Fatalf("%s: dhcp clients %v, lease %+v; want one client with a lease", when, pids, lease)
		}
		if got := addrs(); !slices.Contains(got, lease.Address.String()) {
			t.Errorf("%s: %s has %q; want the leased %s", when, link, got, lease.Address)
		}
	}

	// The tried static address is in the leased one's subnet; secondaries
	// are not promoted (as on a host without systemd), so Apply must stop
	// the client before it adds the address, or the kernel would delete
	// it with the leased primary.
	dhcpITPromoteSecondaries(t, host, link, false)
	host.must(t, func() error { _, err := Apply(ctx, log, layout, dhcp, ApplyOptions{}); return err })
	wantClient("DHCP applied", true)

	// DHCP to static on trial: the client stops; the watchdog rolls back.
	var p *Pending
	host.must(t, func() error {
		var err error
		_, p, err = ApplyDesired(ctx, log, layout, static, DesiredOptions{Try: 8 * time.Second})
		return err
	})
	if !slices.Equal(p.DHCPClients, []string{link}) {
		t.Errorf("pending try records DHCP clients %q; want [%s]", p.DHCPClients, link)
	}
	wantClient("static on trial", false)
	if got := addrs(); !slices.Equal(got, []string{"10.67.0.10/24"}) {
		t.Errorf("static on trial: %s has %q; want the static 10.67.0.10/24 only", link, got)
	}
	for {
		if _, err := PendingTry(layout); errors.Is(err, ErrNoPendingTry) {
			break
		}
		if time.Now().After(p.Deadline.Add(20 * time.Second)) {
			logb, _ := os.ReadFile(filepath.Join(layout.LogDir(), wdLogName))
			t.Fatalf("try still pending 20s after its deadline; watchdog log:\n%s", logb)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
	if logb, _ := os.ReadFile(filepath.Join(layout.LogDir(), wdLogName)); !bytes.Contains(logb, []byte("started the DHCP client the try stopped")) {
		t.Errorf("watchdog log lacks the DHCP client's restart:\n%s", logb)
	}
	wantClient("after the watchdog's rollback", true)
	if got := addrs(); slices.Contains(got, "10.67.0.10/24") {
		t.Errorf("after the rollback %s still has the tried static address: %q", link, got)
	}

	// Static to DHCP on trial: the try starts a client; rolling back stops it.
	host.must(t, func() error {
		_, err := Apply(ctx, log, layout, static, ApplyOptions{AllowDefaultRouteChange: true})
		return err
	})
	wantClient("static applied", false)
	host.must(t, func() error {
		_, _, err := ApplyDesired(ctx, log, layout, dhcp, DesiredOptions{Try: 30 * time.Second})
		return err
	})
	wantClient("DHCP on trial", true)
	host.must(t, func() error { return RollbackDesired(ctx, layout) })
	wantClient("after virt net rollback", false)
	if got := addrs(); !slices.Equal(got, []string{"10.67.0.10/24"}) {
		t.Errorf("after the rollback %s has %q; want the static 10.67.0.10/24 only", link, got)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
}

// dhcpITPromoteSecondaries sets net.ipv4.conf.<link>.promote_secondaries
// in the namespace, and checks that it took.
func dhcpITPromoteSecondaries(t *testing.T, ns *testNS, link string, on bool) {
	t.Helper()
	path := "/proc/sys/net/ipv4/conf/" + link + "/promote_secondaries"
	want := "0"
	if on {
		want = "1"
	}
	ns.must(t, func() error {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			return err
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(bytes.TrimSpace(got)) != want {
			return fmt.Errorf("%s: got %q after writing %s", path, got, want)
		}
		return nil
	})
}

// Making management static in the subnet of its DHCP lease (the leased
// address itself, or another one) keeps the static address on a link that
// does not promote secondaries: Apply stops the client, which deletes the
// leased primary, before it adds the address. So does a try of the same
// change, which verifies and is kept. A failed apply starts the client
// again.
func TestDHCPToStaticSameSubnetIntegration(t *testing.T) {
	tests := []struct {
		name, link, peer, net string
		static                func(lease netip.Prefix) netip.Prefix
	}{
		{"the leased address", "vcdhcp2", "vcdhcp2s", "10.68.0", func(l netip.Prefix) netip.Prefix { return l }},
		{"another address of the subnet", "vcdhcp3", "vcdhcp3s", "10.69.0", func(netip.Prefix) netip.Prefix {
			return netip.MustParsePrefix("10.69.0.10/24")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			link := tc.link
			host, layout := dhcpITTopo(t, link, tc.peer, tc.net)
			tryTestKillWatchdogs(t, PendingPath(layout))
			dhcpITPromoteSecondaries(t, host, link, false)
			log := testutil.Logger(t)
			ctx := context.Background()
			gw := tc.net + ".1"
			stop := "stop DHCP client on " + link
			dhcp := &Config{APIVersion: APIVersion, Kind: Kind, Management: &Management{Interface: link, DHCP: true}}
			staticFor := func(lease netip.Prefix) *Config {
				return &Config{APIVersion: APIVersion, Kind: Kind, Management: &Management{
					Interface: link, Addresses: []string{tc.static(lease).String()}, Gateway: gw}}
			}
			h := host.handle(t)
			addrs := func() []string { t.Helper(); return dhcpITAddrs(t, h, link) }
			defaultVia := func() (gws []string) {
				t.Helper()
				routes, err := h.RouteList(nil, netlink.FAMILY_V4)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range routes {
					if r.Dst == nil || r.Dst.IP.IsUnspecified() {
						gws = append(gws, r.Gw.String())
					}
				}
				return gws
			}
			apply := func(cfg *Config, opts ApplyOptions) (*Result, error) {
				t.Helper()
				var res *Result
				err := host.run(func() error {
					var err error
					res, err = Apply(ctx, log, layout, cfg, opts)
					return err
				})
				if res != nil {
					t.Logf("apply: steps %q", res.Steps)
				}
				return res, err
			}
			// lease checks that one client runs, holding a lease whose
			// address is on the link, and returns that address.
			lease := func(when string) netip.Prefix {
				t.Helper()
				pids := dhcpITClients(layout.Root)
				l, err := ReadDHCPLease(layout, link)
				if err != nil {
					t.Fatal(err)
				}
				if len(pids) != 1 || l == nil {
					t.Fatalf("%s: dhcp clients %v, lease %+v; want one client with a lease", when, pids, l)
				}
				if got := addrs(); !slices.Contains(got, l.Address.String()) {
					t.Errorf("%s: %s has %q; want the leased %s", when, link, got, l.Address)
				}
				return l.Address
			}
			// wantStatic checks that no client runs and that the link
			// has the static address only, with the default route.
			wantStatic := func(when string, cfg *Config) {
				t.Helper()
				if pids := dhcpITClients(layout.Root); len(pids) != 0 {
					t.Errorf("%s: dhcp clients %v; want none", when, pids)
				}
				if got, want := addrs(), cfg.Management.Addresses; !slices.Equal(got, want) {
					t.Errorf("%s: %s has %q; want the static %q only", when, link, got, want)
				}
				if got := defaultVia(); !slices.Equal(got, []string{gw}) {
					t.Errorf("%s: default routes via %q; want via %s", when, got, gw)
				}
			}

			if _, err := apply(dhcp, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			lease("DHCP applied")

			// A step after the client's stop fails: the client is started
			// again, and the record still says DHCP.
			boom := errors.New("boom")
			_, err := apply(staticFor(lease("before the failed apply")), ApplyOptions{afterStep: func(i int, desc string) error {
				if desc == stop {
					if i != 0 {
						t.Errorf("the client's stop is step %d; want 0", i)
					}
					return nil
				}
				return boom
			}})
			var se *StepError
			if !errors.As(err, &se) || !errors.Is(err, boom) || se.Index != 1 || se.RevertErr != nil {
				t.Fatalf("failing apply: got %v; want a StepError at step 1 (after the client's stop), fully reverted", err)
			}
			lease("after the failed apply")
			if got := defaultVia(); !slices.Equal(got, []string{gw}) {
				t.Errorf("after the failed apply: default routes via %q; want via %s", got, gw)
			}
			if prev, err := LoadApplied(layout); err != nil || dhcpIface(prev) != link {
				t.Errorf("after the failed apply: applied %+v, %v; want the DHCP configuration", prev, err)
			}

			// A dry run lists the steps in the order Apply runs them: the
			// client's stop first.
			static := staticFor(lease("before the static apply"))
			if res, err := apply(static, ApplyOptions{DryRun: true}); err != nil {
				t.Errorf("dry run: %v", err)
			} else if len(res.Steps) == 0 || !strings.HasPrefix(res.Steps[0], stop) {
				t.Errorf("dry run: steps %q; want the client's stop first", res.Steps)
			}
			lease("after the dry run")

			// Without --try: the gateway stays the one the lease had.
			res, err := apply(static, ApplyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) == 0 || res.Steps[0] != stop || !res.Changed {
				t.Errorf("static apply: got steps %q; want the client's stop first", res.Steps)
			}
			wantStatic("static applied", static)
			if l, err := ReadDHCPLease(layout, link); l != nil || err != nil {
				t.Errorf("lease file after the static apply: got %+v, %v; want none", l, err)
			}
			if res, err := apply(static, ApplyOptions{}); err != nil || len(res.Steps) != 0 || res.Changed {
				t.Errorf("second static apply: got %+v, %v; want no steps", res, err)
			}
			wantStatic("static applied twice", static)

			// The same change as a try: verified, and kept.
			if _, err := apply(dhcp, ApplyOptions{AllowDefaultRouteChange: true}); err != nil {
				t.Fatal(err)
			}
			static = staticFor(lease("DHCP applied again"))
			var p *Pending
			host.must(t, func() error {
				var err error
				res, p, err = ApplyDesired(ctx, log, layout, static, DesiredOptions{Try: 30 * time.Second})
				return err
			})
			if len(res.Steps) == 0 || res.Steps[0] != stop {
				t.Errorf("try: got steps %q; want the client's stop first", res.Steps)
			}
			if !slices.Equal(p.DHCPClients, []string{link}) {
				t.Errorf("pending try records DHCP clients %q; want [%s]", p.DHCPClients, link)
			}
			wantStatic("static on trial", static)
			if err := ConfirmDesired(context.Background(), layout); err != nil {
				t.Fatal(err)
			}
			tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
			if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
				t.Errorf("after confirming: pending try %v; want none", err)
			}
			wantStatic("static confirmed", static)
			if res, err := apply(static, ApplyOptions{}); err != nil || len(res.Steps) != 0 || res.Changed {
				t.Errorf("apply after the confirmed try: got %+v, %v; want no steps", res, err)
			}
			wantStatic("static confirmed, applied again", static)
		})
	}
}

// dhcpITAddrs lists link's IPv4 addresses through h.
func dhcpITAddrs(t *testing.T, h *netlink.Handle, link string) []string {
	t.Helper()
	l, err := h.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	as, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	return out
}
