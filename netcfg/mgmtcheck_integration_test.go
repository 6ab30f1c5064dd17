//go:build integration

package netcfg

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/virtcon/virtcon/internal/testutil"
)

// mgmtTestNet is a host namespace whose management NIC mgmt0
// (10.77.9.2/24) is a veth to a gateway namespace (gw0, 10.77.9.1/24)
// that runs dnsmasq answering virtcon.test with 10.0.0.1.
type mgmtTestNet struct {
	host, gw *testNS
}

func mgmtTestSetup(t *testing.T) *mgmtTestNet {
	t.Helper()
	testutil.RequireRoot(t, "creates network namespaces and veth pairs")
	bin, err := dnsmasqBinary()
	if err != nil {
		t.Skipf("needs dnsmasq: %v", err)
	}
	n := &mgmtTestNet{host: newTestNS(t), gw: newTestNS(t)}
	n.host.must(t, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "mgmt0"}, PeerName: "gw0"}); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		if err := mgmtTestAddrUp("mgmt0", "10.77.9.2/24"); err != nil {
			return err
		}
		p, err := netlink.LinkByName("gw0")
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(p, int(n.gw.h))
	})
	n.gw.must(t, func() error { return mgmtTestAddrUp("gw0", "10.77.9.1/24") })

	dir := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
		"--bind-interfaces", "--listen-address=10.77.9.1", "--port=53", "--address=/virtcon.test/10.0.0.1",
		"--pid-file="+filepath.Join(dir, "dnsmasq.pid"), "--log-facility=-", "--log-queries")
	cmd.Stderr = &stderr
	// started from a thread in the gateway namespace: dnsmasq is born there
	n.gw.must(t, cmd.Start)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		t.Logf("dnsmasq:\n%s", stderr.String())
	})
	// wait until it answers
	ready := false
	for deadline := time.Now().Add(5 * time.Second); !ready && time.Now().Before(deadline); {
		n.host.must(t, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			ready, _ = checkDNS(ctx, netip.MustParseAddrPort("10.77.9.1:53"), "virtcon.test")
			return nil
		})
	}
	if !ready {
		t.Fatalf("dnsmasq did not answer within 5s: %s", stderr.String())
	}
	return n
}

func mgmtTestAddrUp(name, cidr string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	// no DAD: the address is usable at once
	a.Flags |= syscall.IFA_F_NODAD
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("%s: add %s: %w", name, cidr, err)
	}
	return netlink.LinkSetUp(l)
}

func (n *mgmtTestNet) test(t *testing.T, cfg *Config, opts CheckOptions) map[string]CheckResult {
	t.Helper()
	var rs []CheckResult
	n.host.must(t, func() error {
		rs = CheckManagement(context.Background(), cfg, opts)
		return nil
	})
	out := map[string]CheckResult{}
	for _, r := range rs {
		t.Logf("%-5t %-32s %s (%v)", r.OK, r.Name, r.Detail, r.Took)
		out[r.Name] = r
	}
	return out
}

// TestMgmtTestNetns runs "test management network" against a real link,
// gateway and DNS server in namespaces: everything passes, the DNS answer
// is dnsmasq's, and each check runs in the caller's namespace (the host
// namespace has no mgmt0).
func TestMgmtTestNetns(t *testing.T) {
	n := mgmtTestSetup(t)
	cfg := &Config{APIVersion: APIVersion, Kind: Kind,
		Management: &Management{Interface: "mgmt0", Addresses: []string{"10.77.9.2/24"}, Gateway: "10.77.9.1"},
		DNS:        DNS{Servers: []string{"10.77.9.1"}},
	}
	start := time.Now()
	rs := n.test(t, cfg, CheckOptions{Name: "virtcon.test", Root: t.TempDir()})
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the checks took %v; want them concurrent, within one 2s timeout", took)
	}
	for _, name := range []string{"link mgmt0", "address 10.77.9.2/24", "gateway 10.77.9.1 ARP", "gateway 10.77.9.1 ping", "dns 10.77.9.1"} {
		r, ok := rs[name]
		if !ok || !r.OK {
			t.Errorf("%s: %+v; want a pass", name, r)
		}
	}
	if len(rs) != 5 {
		t.Errorf("%d results; want 5", len(rs))
	}
	if d := rs["dns 10.77.9.1"].Detail; !strings.Contains(d, "virtcon.test is 10.0.0.1") {
		t.Errorf("dns detail %q; want dnsmasq's answer 10.0.0.1", d)
	}
}

// TestMgmtTestNetnsFailures: a missing address, a silent gateway and a
// silent DNS server fail, each within its own timeout; a link whose peer
// is down has no carrier.
func TestMgmtTestNetnsFailures(t *testing.T) {
	n := mgmtTestSetup(t)
	cfg := &Config{APIVersion: APIVersion, Kind: Kind,
		Management: &Management{Interface: "mgmt0", Addresses: []string{"10.77.9.3/24"}, Gateway: "10.77.9.9"},
		DNS:        DNS{Servers: []string{"10.77.9.9"}},
	}
	start := time.Now()
	rs := n.test(t, cfg, CheckOptions{Timeout: time.Second, Root: t.TempDir()})
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Errorf("the checks took %v; want about one 1s timeout", took)
	}
	want := map[string]string{
		"link mgmt0":             "",
		"address 10.77.9.3/24":   "missing",
		"gateway 10.77.9.9 ARP":  "no ARP reply",
		"gateway 10.77.9.9 ping": "no echo reply",
		"dns 10.77.9.9":          "no answer",
	}
	for name, detail := range want {
		r, ok := rs[name]
		switch {
		case !ok:
			t.Errorf("no result %q", name)
		case detail == "" && !r.OK:
			t.Errorf("%s: %+v; want a pass", name, r)
		case detail != "" && (r.OK || !strings.Contains(r.Detail, detail)):
			t.Errorf("%s: %+v; want a failure saying %q", name, r, detail)
		}
	}

	// the far end goes down: no carrier on mgmt0
	n.gw.must(t, func() error {
		l, err := netlink.LinkByName("gw0")
		if err != nil {
			return err
		}
		return netlink.LinkSetDown(l)
	})
	rs = n.test(t, cfg, CheckOptions{Timeout: 500 * time.Millisecond, Root: t.TempDir()})
	if r := rs["link mgmt0"]; r.OK || !strings.Contains(r.Detail, "no carrier") {
		t.Errorf("link mgmt0 with its peer down: %+v; want no carrier", r)
	}
}
