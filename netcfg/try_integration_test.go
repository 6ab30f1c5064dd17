//go:build integration

package netcfg

// Every test here makes its own network namespaces (unnamed: they vanish
// with their last reference) with a veth pair between a "host" and a
// "peer", and runs the code under test on a thread locked into the host
// namespace; a try's watchdog is born there. The host's own interfaces
// are never touched, and traffic stays between the two namespaces.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

const (
	tryHostAddr = "192.0.2.1/24"
	tryPeerAddr = "192.0.2.2/24"
	tryPeerIP   = "192.0.2.2"
	tryEchoPort = 7
	// tryCallerEnv makes the test binary a CLI that runs Try (cutting the
	// peer off), prints the pending try and sleeps until it is killed.
	tryCallerEnv         = "VIRTCON_NETCFG_TEST_TRY_CALLER"
	tryCallerDeadlineEnv = "VIRTCON_NETCFG_TEST_TRY_DEADLINE"
)

func init() { testChildMains[tryCallerEnv] = tryCallerMain }

// tryTopo is a host namespace whose uplink up0 (192.0.2.1/24, default
// route via the peer) is a veth to peer0 (192.0.2.2/24) in a peer
// namespace that runs a UDP echo server.
type tryTopo struct{ host, peer *testNS }

func tryNewTopo(t *testing.T) *tryTopo {
	t.Helper()
	tp := &tryTopo{host: newTestNS(t), peer: newTestNS(t)}
	tp.host.must(t, func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "up0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "peer0", PeerNamespace: netlink.NsFd(int(tp.peer.h))}); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		if err := tryLinkUp("up0", tryHostAddr); err != nil {
			return err
		}
		up0, _ := netlink.LinkByName("up0")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP(tryPeerIP)})
	})
	var conn *net.UDPConn
	tp.peer.must(t, func() error {
		if err := tryLinkUp("peer0", tryPeerAddr); err != nil {
			return err
		}
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: tryEchoPort})
		return err
	})
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = conn.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { conn.Close() })
	// The first exchange waits for the veth carrier and ARP.
	tp.waitReachable(t, true, 5*time.Second)
	return tp
}

// tryLinkUp brings a link up with the given addresses, in the current namespace.
func tryLinkUp(name string, addrs ...string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	for _, a := range addrs {
		ipn, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, ipn); err != nil {
			return fmt.Errorf("link %s: add %s: %w", name, a, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("link %s: up: %w", name, err)
	}
	return nil
}

// reachable reports whether the peer's echo server answers the host.
func (tp *tryTopo) reachable() bool {
	return tp.host.run(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(tryPeerIP), Port: tryEchoPort})
		if err != nil {
			return err
		}
		defer c.Close()
		nonce := []byte(fmt.Sprint(time.Now().UnixNano()))
		if _, err := c.Write(nonce); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return err
			}
			if bytes.Equal(buf[:n], nonce) {
				return nil
			}
		}
	}) == nil
}

// waitReachable polls until reachability is want; it returns how long that
// took, or fails the test after within.
func (tp *tryTopo) waitReachable(t *testing.T, want bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for tp.reachable() != want {
		if time.Since(start) > within {
			t.Fatalf("peer reachable=%v still after %v; want %v", !want, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// tryCutOff is an apply that cuts the host off from the peer: it takes
// the address off the uplink (the default route goes with it).
func tryCutOff(context.Context) error {
	l, err := netlink.LinkByName("up0")
	if err != nil {
		return err
	}
	a, _ := netlink.ParseAddr(tryHostAddr)
	return netlink.AddrDel(l, a)
}

// tryEnslaveCutOff cuts the host off the other way: it puts the uplink
// into a new bridge and drops its address instead of moving it there.
// (Enslaving alone does not cut: the port keeps its address, and Linux
// answers for any local address on any interface.)
func tryEnslaveCutOff(ctx context.Context) error {
	la := netlink.NewLinkAttrs()
	la.Name = "br0"
	br := &netlink.Bridge{LinkAttrs: la}
	if err := netlink.LinkAdd(br); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return err
	}
	up0, err := netlink.LinkByName("up0")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMaster(up0, br); err != nil {
		return err
	}
	return tryCutOff(ctx)
}

func tryTestSetup(t *testing.T) (*tryTopo, paths.Layout, *slog.Logger) {
	testutil.RequireRoot(t, "creates network namespaces, veths and bridges")
	t.Parallel()
	tp := tryNewTopo(t)
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	return tp, layout, testutil.Logger(t)
}

func tryWaitDefaultRouteVia(t *testing.T, tp *tryTopo, link string, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if tryDefaultRouteVia(t, tp, link) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tryDefaultRouteVia(t *testing.T, tp *tryTopo, link string) bool {
	t.Helper()
	found := false
	tp.host.must(t, func() error {
		l, err := netlink.LinkByName(link)
		if err != nil {
			return nil
		}
		rs, err := netlink.RouteList(l, netlink.FAMILY_V4)
		for _, r := range rs {
			if r.Gw.Equal(net.ParseIP(tryPeerIP)) && (r.Dst == nil || r.Dst.IP.IsUnspecified()) {
				found = true
			}
		}
		return err
	})
	return found
}

func TestTryIntegrationUnconfirmedRestores(t *testing.T) {
	tp, layout, log := tryTestSetup(t)
	const deadline = 6 * time.Second
	var p *Pending
	tp.host.must(t, func() error {
		var err error
		p, err = Try(context.Background(), log, layout, []string{"up0", "br0"}, tryEnslaveCutOff, nil, deadline)
		return err
	})
	if tp.reachable() {
		t.Fatal("peer still reachable after the cutting apply")
	}
	waited := tp.waitReachable(t, true, time.Until(p.Deadline)+3*time.Second)
	since := time.Since(p.Started)
	if since < deadline-time.Second {
		t.Errorf("restored %v after the try began; want no sooner than the %v deadline", since, deadline)
	}
	t.Logf("restored %v after the try began (deadline %v; waited %v)", since.Round(time.Millisecond), deadline, waited.Round(time.Millisecond))
	// the peer may answer before the watchdog has finished: wait for it to exit
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
	tp.host.must(t, func() error {
		if _, err := netlink.LinkByName("br0"); !snapNotFound(err) {
			return fmt.Errorf("br0 still exists after the rollback (%v)", err)
		}
		return nil
	})
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after the rollback: %v; want ErrNoPendingTry", err)
	}
}

// tryCallerMain is the CLI of TestTryIntegrationCallerKilled, run in the
// host namespace: it tries a cutting change, prints the pending try and
// waits to be killed.
func tryCallerMain() {
	layout := paths.New(os.Getenv(tryCallerEnv))
	d, err := time.ParseDuration(os.Getenv(tryCallerDeadlineEnv))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	p, err := Try(context.Background(), log, layout, []string{"up0"}, tryCutOff, nil, d)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PENDING", p.ID, p.WatchdogPID)
	time.Sleep(time.Hour)
}

func TestTryIntegrationCallerKilled(t *testing.T) {
	tp, layout, _ := tryTestSetup(t)
	const deadline = 6 * time.Second
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), tryCallerEnv+"="+layout.Root, tryCallerDeadlineEnv+"="+deadline.String())
	cmd.Stderr = &stderr
	// Its own process group, killed whole as a hung-up terminal would.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tp.host.must(t, cmd.Start)
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var got string
	select {
	case got = <-line:
	case <-time.After(20 * time.Second):
		t.Fatalf("caller printed nothing in 20s; stderr:\n%s", stderr.String())
	}
	var id string
	var wdPID int
	if _, err := fmt.Sscanf(got, "PENDING %s %d", &id, &wdPID); err != nil {
		t.Fatalf("caller said %q (%v); stderr:\n%s", got, err, stderr.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	if tp.reachable() {
		t.Fatal("peer reachable right after the cutting try")
	}
	p, err := PendingTry(layout)
	if err != nil || p.ID != id || p.WatchdogPID != wdPID || !p.WatchdogRunning() {
		t.Fatalf("after the kill: pending %+v, %v; want try %s with live watchdog %d", p, err, id, wdPID)
	}
	tp.waitReachable(t, true, time.Until(p.Deadline)+3*time.Second)
	t.Logf("restored %v after the caller was killed, %v after the try began (deadline %v)",
		time.Since(killed).Round(time.Millisecond), time.Since(p.Started).Round(time.Millisecond), deadline)
	// the watchdog restores addresses before routes: the peer can answer a
	// moment before the default route is back
	if !tryWaitDefaultRouteVia(t, tp, "up0", 3*time.Second) {
		t.Error("default route via the peer not restored on up0")
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after the rollback: %v; want ErrNoPendingTry", err)
	}
	logb, _ := os.ReadFile(filepath.Join(layout.LogDir(), wdLogName))
	if !strings.Contains(string(logb), "network try rolled back") {
		t.Errorf("watchdog log lacks the rollback:\n%s", logb)
	}
}

func TestTryIntegrationConfirmedKept(t *testing.T) {
	tp, layout, log := tryTestSetup(t)
	const deadline = 5 * time.Second
	apply := func(context.Context) error {
		l, err := netlink.LinkByName("up0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, 1400); err != nil {
			return err
		}
		a, _ := netlink.ParseAddr("192.0.2.50/24")
		return netlink.AddrAdd(l, a)
	}
	var p *Pending
	tp.host.must(t, func() error {
		var err error
		p, err = Try(context.Background(), log, layout, []string{"up0"}, apply,
			func(ctx context.Context) error {
				return Verify(ctx, &Config{Management: &Management{Interface: "up0", Addresses: []string{"192.0.2.50/24"}, Gateway: tryPeerIP}}, 3*time.Second)
			}, deadline)
		return err
	})
	if err := Confirm(context.Background(), layout); err != nil {
		t.Fatal(err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	time.Sleep(time.Until(p.Deadline) + 1500*time.Millisecond)
	tp.host.must(t, func() error {
		l, err := netlink.LinkByName("up0")
		if err != nil {
			return err
		}
		if l.Attrs().MTU != 1400 {
			return fmt.Errorf("up0 MTU %d after the deadline; want the confirmed 1400", l.Attrs().MTU)
		}
		as, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range as {
			if a.IPNet.String() == "192.0.2.50/24" {
				return err
			}
		}
		return fmt.Errorf("confirmed address 192.0.2.50/24 gone after the deadline: %v", as)
	})
	if !tp.reachable() {
		t.Error("peer unreachable after a confirmed try")
	}
}

func TestTryIntegrationRollbackNow(t *testing.T) {
	tp, layout, log := tryTestSetup(t)
	tp.host.must(t, func() error {
		_, err := Try(context.Background(), log, layout, []string{"up0"}, tryCutOff, nil, 60*time.Second)
		return err
	})
	if tp.reachable() {
		t.Fatal("peer reachable after the cutting apply")
	}
	start := time.Now()
	tp.host.must(t, func() error { return Rollback(context.Background(), layout) })
	if took := time.Since(start); took > time.Second {
		t.Errorf("Rollback took %v", took)
	}
	tp.waitReachable(t, true, time.Second)
	if !tryDefaultRouteVia(t, tp, "up0") {
		t.Error("default route via the peer not restored on up0")
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after Rollback: %v; want ErrNoPendingTry", err)
	}
}

func TestTryIntegrationVerifyFailureRestores(t *testing.T) {
	tp, layout, log := tryTestSetup(t)
	cfg := &Config{Management: &Management{Interface: "up0", Addresses: []string{tryHostAddr}, Gateway: tryPeerIP}}
	start := time.Now()
	err := tp.host.run(func() error {
		_, err := Try(context.Background(), log, layout, []string{"up0"}, tryCutOff,
			func(ctx context.Context) error { return Verify(ctx, cfg, time.Second) }, 30*time.Second)
		return err
	})
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("Try: %v; want ErrVerify", err)
	}
	t.Logf("Try failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "192.0.2.1/24 missing") {
		t.Errorf("error does not name the missing address: %v", err)
	}
	tp.waitReachable(t, true, 500*time.Millisecond)
	if !tryDefaultRouteVia(t, tp, "up0") {
		t.Error("default route via the peer not restored on up0")
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry: %v; want ErrNoPendingTry", err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
}

func TestVerifyIntegration(t *testing.T) {
	testutil.RequireRoot(t, "creates network namespaces, veths and bridges")
	t.Parallel()
	tp := tryNewTopo(t)
	tp.peer.must(t, snapAddr("peer0", "2001:db8::2/64", unix.IFA_F_NODAD))
	tp.host.must(t, snapAddr("up0", "2001:db8::1/64", unix.IFA_F_NODAD))
	tests := []struct {
		name    string
		cfg     *Config
		wantErr string // "" for success
	}{
		{"gateway answers", &Config{Management: &Management{Interface: "up0", Addresses: []string{tryHostAddr}, Gateway: tryPeerIP}}, ""},
		{"ipv6 gateway answers", &Config{Management: &Management{Interface: "up0", Addresses: []string{"2001:db8::1/64"}, Gateway: "2001:db8::2"}}, ""},
		{"no gateway", &Config{Management: &Management{Interface: "up0", Addresses: []string{tryHostAddr}}}, ""},
		{"silent gateway", &Config{Management: &Management{Interface: "up0", Addresses: []string{tryHostAddr}, Gateway: "192.0.2.99"}}, "gateway 192.0.2.99: no ARP reply"},
		{"silent ipv6 gateway", &Config{Management: &Management{Interface: "up0", Addresses: []string{"2001:db8::1/64"}, Gateway: "2001:db8::99"}}, "gateway 2001:db8::99: no neighbour answer"},
		{"missing address", &Config{Management: &Management{Interface: "up0", Addresses: []string{"192.0.2.9/24"}}}, `address 192.0.2.9/24 missing on "up0"`},
		{"missing link", &Config{Bridges: []Bridge{{Name: "brnone"}}}, `link "brnone" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := tp.host.run(func() error { return Verify(context.Background(), tt.cfg, 1500*time.Millisecond) })
			took := time.Since(start)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Verify: %v; want nil", err)
				}
				if took > time.Second {
					t.Errorf("Verify took %v", took)
				}
				return
			}
			if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Verify: %v; want ErrVerify with %q", err, tt.wantErr)
			}
			if took > 2500*time.Millisecond {
				t.Errorf("Verify took %v with a 1.5s timeout", took)
			}
		})
	}
}

// STP: an uplink enslaved into a bridge with STP on listens, then learns,
// for a forward delay each; Verify waits for forwarding instead of failing,
// and a deadline shorter than that convergence is refused up front.
func TestTryIntegrationSTP(t *testing.T) {
	tp, layout, log := tryTestSetup(t)
	const fd = 2 * time.Second // the kernel's minimum with STP on
	tp.host.must(t, func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "br0"
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
			return err
		}
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		if err := writeBridgeSTP(nil, br.Attrs().Index, true, fd); err != nil {
			return err
		}
		return netlink.LinkSetUp(br)
	})
	links := []string{"up0", "br0"}
	var least time.Duration
	tp.host.must(t, func() error { least = MinTryDeadline(nil, links); return nil })
	if want := 2*fd + TryMargin; least != want {
		t.Errorf("MinTryDeadline = %v; want %v", least, want)
	}
	cfg := &Config{
		Bridges:    []Bridge{{Name: "br0", Ports: []string{"up0"}, STP: true, Addresses: []string{tryHostAddr}}},
		Management: &Management{Interface: "br0", Addresses: []string{tryHostAddr}, Gateway: tryPeerIP},
	}
	// The uplink joins the bridge, its address and default route move onto it.
	apply := func(context.Context) error {
		up0, err := netlink.LinkByName("up0")
		if err != nil {
			return err
		}
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(tryHostAddr)
		if err := netlink.AddrDel(up0, a); err != nil {
			return err
		}
		if err := netlink.LinkSetMaster(up0, br); err != nil {
			return err
		}
		if err := netlink.AddrAdd(br, a); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: br.Attrs().Index, Gw: net.ParseIP(tryPeerIP)})
	}
	err := tp.host.run(func() error {
		_, err := Try(context.Background(), log, layout, links,
			func(context.Context) error { t.Error("applied despite a short deadline"); return nil }, nil, 5*time.Second)
		return err
	})
	var dl *DeadlineTooShortError
	if !errors.As(err, &dl) || dl.Got != 5*time.Second || dl.Min != 9*time.Second || !strings.Contains(err.Error(), "a try of 5s") || !strings.Contains(err.Error(), "9s") {
		t.Errorf("Try with a 5s deadline: %v; want ErrDeadlineTooShort naming a try of 5s and the 9s minimum", err)
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("refused try left a record: %v", err)
	}

	var verifyTook time.Duration
	tp.host.must(t, func() error {
		_, err := Try(context.Background(), log, layout, links, apply, func(ctx context.Context) error {
			start := time.Now()
			err := Verify(ctx, cfg, 4*fd+2*time.Second)
			verifyTook = time.Since(start)
			return err
		}, 12*time.Second)
		return err
	})
	t.Logf("Verify waited %v for STP (forward delay %v)", verifyTook.Round(time.Millisecond), fd)
	if verifyTook < 3*time.Second {
		t.Errorf("Verify returned after %v; the port cannot forward before ~%v", verifyTook, 2*fd)
	}
	if err := Confirm(context.Background(), layout); err != nil {
		t.Fatal(err)
	}
	if !tp.reachable() {
		t.Error("peer unreachable through the STP bridge after the try")
	}
	tp.host.must(t, func() error {
		up0, err := netlink.LinkByName("up0")
		if err != nil {
			return err
		}
		br, _ := netlink.LinkByName("br0")
		if up0.Attrs().MasterIndex != br.Attrs().Index {
			return errors.New("up0 left br0 after a confirmed try")
		}
		return nil
	})
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
}

// The case: the watchdog of a try is killed -9. At the deadline
// nothing restores the network; the first ResolveExpiredTry after it (any
// `virt net` command, the DCUI's status screen) does.
func TestTryIntegrationKilledWatchdogResolved(t *testing.T) {
	tp, layout, log := tryTestSetup(t)
	const deadline = 6 * time.Second
	var p *Pending
	tp.host.must(t, func() error {
		var err error
		p, err = Try(context.Background(), log, layout, []string{"up0"}, tryCutOff, nil, deadline)
		return err
	})
	if err := syscall.Kill(p.WatchdogPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	time.Sleep(time.Until(p.Deadline) + time.Second)
	if tp.reachable() {
		t.Fatal("peer reachable after the deadline with the watchdog killed; the test shows nothing")
	}
	var r *ResolvedTry
	tp.host.must(t, func() error {
		var err error
		r, err = ResolveExpiredTry(context.Background(), log, layout)
		return err
	})
	if r == nil || r.ID != p.ID || !strings.Contains(r.Why, "has exited") {
		t.Fatalf("ResolveExpiredTry = %+v; want try %s rolled back, its watchdog named as exited", r, p.ID)
	}
	tp.waitReachable(t, true, time.Second)
	if !tryDefaultRouteVia(t, tp, "up0") {
		t.Error("default route via the peer not restored on up0")
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after the rollback: %v; want ErrNoPendingTry", err)
	}
}
