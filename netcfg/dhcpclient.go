package netcfg

// The management interface's DHCPv4 client. virtcon has no daemon, so the
// client is `virt` itself, re-executed detached (own session, stdio to a log
// file) with VIRTCON_DHCP_CLIENT naming the interface. Every Apply checks it
// like dnsmasq: pidfile, then /proc/PID/environ naming our interface and
// lease file, so a reused PID never passes for our client. The client works
// in the network namespace it was started in.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/paths"
)

// DHCPClientEnv tells the DHCP client process its interface (and marks
// it: dhcpIsOurs looks for it in /proc).
const DHCPClientEnv = "VIRTCON_DHCP_CLIENT"

const (
	// dhcpLeaseEnv and dhcpPIDEnv carry the lease file and pidfile paths.
	dhcpLeaseEnv = "VIRTCON_DHCP_CLIENT_LEASE"
	dhcpPIDEnv   = "VIRTCON_DHCP_CLIENT_PIDFILE"
	// dhcpStartTimeout bounds the wait for the first lease.
	dhcpStartTimeout = 10 * time.Second
	// dhcpStopGrace is how long a client gets to release and clean up.
	dhcpStopGrace = 3 * time.Second
	// dhcpDefaultLease is assumed when the server sends no lease time.
	dhcpDefaultLease = time.Hour
)

// dhcpExecutable is the program the client runs: this one. Tests may
// replace it before any test runs in parallel.
var dhcpExecutable = os.Executable

// DHCPLease is what the client writes to its lease file.
type DHCPLease struct {
	Interface string       `json:"interface"`
	Address   netip.Prefix `json:"address"` // with the prefix from the subnet mask
	Router    netip.Addr   `json:"router,omitzero"`
	DNS       []netip.Addr `json:"dns,omitempty"`
	Server    netip.Addr   `json:"server,omitzero"`
	LeaseTime int64        `json:"lease_time_seconds"`
	Obtained  time.Time    `json:"obtained"`
}

// Expiry is when the lease runs out unless renewed.
func (l *DHCPLease) Expiry() time.Time {
	return l.Obtained.Add(time.Duration(l.LeaseTime) * time.Second)
}

type dhcpFiles struct{ lease, pid, log string }

func dhcpFilesFor(layout paths.Layout, iface string) dhcpFiles {
	return dhcpFiles{
		lease: filepath.Join(layout.NetworkDir(), "dhcp-"+iface+".json"),
		pid:   filepath.Join(layout.RunDir(), "network", "dhcp-"+iface+".pid"),
		log:   filepath.Join(layout.LogDir(), "network-dhcp-"+iface+".log"),
	}
}

// ReadDHCPLease reads the current lease of the management interface iface;
// nil, nil when it holds none.
func ReadDHCPLease(layout paths.Layout, iface string) (*DHCPLease, error) {
	if err := natCheckLinkName(iface); err != nil {
		return nil, err
	}
	return dhcpReadLease(dhcpFilesFor(layout, iface).lease)
}

func dhcpReadLease(path string) (*DHCPLease, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("dhcp lease: %w", err)
	}
	var l DHCPLease
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("dhcp lease %s: %w", path, err)
	}
	return &l, nil
}

func dhcpWriteLease(path string, l *DHCPLease) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}

// dhcpPrefixLen is the prefix length of an IPv4 subnet mask; a missing mask
// means the address's classful default.
func dhcpPrefixLen(ip net.IP, mask net.IPMask) (int, error) {
	if mask == nil {
		mask = ip.To4().DefaultMask()
		if mask == nil {
			return 0, fmt.Errorf("address %v: not IPv4", ip)
		}
	}
	ones, bits := mask.Size()
	if bits != 32 {
		return 0, fmt.Errorf("subnet mask %v: not a contiguous IPv4 mask", net.IP(mask))
	}
	return ones, nil
}

// dhcpLeaseFrom turns an ACK into the lease file's record.
func dhcpLeaseFrom(iface string, l *nclient4.Lease) (*DHCPLease, error) {
	ack := l.ACK
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || !ip.IsValid() || ip.IsUnspecified() {
		return nil, fmt.Errorf("ack without an address (yiaddr %v)", ack.YourIPAddr)
	}
	bits, err := dhcpPrefixLen(ack.YourIPAddr, ack.SubnetMask())
	if err != nil {
		return nil, err
	}
	out := &DHCPLease{
		Interface: iface,
		Address:   netip.PrefixFrom(ip, bits),
		LeaseTime: int64(ack.IPAddressLeaseTime(dhcpDefaultLease) / time.Second),
		Obtained:  l.CreationTime,
	}
	if r := ack.Router(); len(r) > 0 {
		out.Router, _ = netip.AddrFromSlice(r[0].To4())
	}
	for _, d := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(d.To4()); ok {
			out.DNS = append(out.DNS, a)
		}
	}
	out.Server, _ = netip.AddrFromSlice(ack.ServerIdentifier().To4())
	return out, nil
}

// dhcpEnv is what the client process is started with.
type dhcpEnv struct{ iface, lease, pid string }

// dhcpParseEnv reads the client's environment; ok is false when this
// process is not a DHCP client.
func dhcpParseEnv(lookup func(string) (string, bool)) (env dhcpEnv, ok bool, err error) {
	iface, ok := lookup(DHCPClientEnv)
	if !ok {
		return dhcpEnv{}, false, nil
	}
	env = dhcpEnv{iface: iface}
	env.lease, _ = lookup(dhcpLeaseEnv)
	env.pid, _ = lookup(dhcpPIDEnv)
	if err := natCheckLinkName(iface); err != nil {
		return env, true, fmt.Errorf("%s: %w", DHCPClientEnv, err)
	}
	if !filepath.IsAbs(env.lease) {
		return env, true, fmt.Errorf("%s: %q is not an absolute path", dhcpLeaseEnv, env.lease)
	}
	if env.pid != "" && !filepath.IsAbs(env.pid) {
		return env, true, fmt.Errorf("%s: %q is not an absolute path", dhcpPIDEnv, env.pid)
	}
	return env, true, nil
}

// dhcpEnviron is the client's environment: this process's, without the
// variables of another client or of a try's watchdog (a rollback starts
// clients from the watchdog; a client that inherited its variables would
// run as a second watchdog instead, and pass for it).
func dhcpEnviron(f dhcpFiles, iface string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case DHCPClientEnv, dhcpLeaseEnv, dhcpPIDEnv, WatchdogEnv, wdIDEnv, wdReadyEnv:
			return true
		}
		return false
	})
	return append(env, DHCPClientEnv+"="+iface, dhcpLeaseEnv+"="+f.lease, dhcpPIDEnv+"="+f.pid)
}

// dhcpMode is the DHCP client's child mode (see internal/reexec).
const dhcpMode = "dhcp-client"

func init() { reexec.Register(dhcpMode, dhcpMain) }

// dhcpMain is the management interface's DHCP client (the program's main
// calls reexec.Init first thing), on the interface that
// VIRTCON_DHCP_CLIENT names; it never returns before SIGTERM. It acquires
// a lease, puts the address and the default route on the interface,
// renews at T1 (and keeps trying until expiry, past T2), drops the
// address when the lease is lost and starts over; SIGTERM releases the
// lease, removes what it added and exits.
func dhcpMain() int {
	env, ok, err := dhcpParseEnv(os.LookupEnv)
	if !ok {
		err = fmt.Errorf("%s is not set", DHCPClientEnv)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "virtcon dhcp client:", err)
		return 2
	}
	return dhcpRun(env)
}

type dhcpClient struct {
	log   *slog.Logger
	env   dhcpEnv
	nc    *nclient4.Client
	lease *nclient4.Lease
	addr  *netlink.Addr  // the address we put on the interface
	route *netlink.Route // the default route we added; nil if none
}

func dhcpRun(env dhcpEnv) int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c := &dhcpClient{
		log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("dhcp", env.iface, "pid", os.Getpid()),
		env: env,
	}
	c.log.Info("dhcp client: starting")
	nc, err := nclient4.New(env.iface, nclient4.WithTimeout(time.Second), nclient4.WithRetry(5))
	if err != nil {
		c.log.Error("dhcp client: cannot open the interface", "err", err)
		c.exit()
		return 1
	}
	c.nc = nc
	defer nc.Close()
	for backoff := time.Second; ctx.Err() == nil; {
		lease, err := nc.Request(ctx)
		if err == nil {
			err = c.bind(lease)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.log.Warn("dhcp client: no lease yet", "err", err, "retry", backoff)
			c.unbind()
			dhcpSleep(ctx, time.Now().Add(backoff))
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if err := c.hold(ctx); ctx.Err() == nil {
			c.log.Warn("dhcp client: lease lost; removing the address", "err", err)
			c.unbind()
		}
	}
	c.log.Info("dhcp client: stopping; releasing the lease")
	if c.lease != nil {
		if err := nc.Release(c.lease); err != nil {
			c.log.Warn("dhcp client: release failed", "err", err)
		}
	}
	c.unbind()
	c.exit()
	return 0
}

// exit removes the pidfile if it still names this process.
func (c *dhcpClient) exit() {
	if c.env.pid == "" {
		return
	}
	if b, err := os.ReadFile(c.env.pid); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(c.env.pid)
	}
}

// hold renews the bound lease until it is lost (expiry or NAK) or ctx ends.
// Renewing and rebinding both broadcast a REQUEST; past T2 it keeps trying
// until the lease expires.
func (c *dhcpClient) hold(ctx context.Context) error {
	for {
		ack := c.lease.ACK
		lt := ack.IPAddressLeaseTime(dhcpDefaultLease)
		obtained := c.lease.CreationTime
		t1 := obtained.Add(ack.IPAddressRenewalTime(lt / 2))
		t2 := obtained.Add(ack.IPAddressRebindingTime(lt * 7 / 8))
		exp := obtained.Add(lt)
		if !dhcpSleep(ctx, t1) {
			return ctx.Err()
		}
		for {
			now := time.Now()
			if !now.Before(exp) {
				return errors.New("lease expired")
			}
			phase := "renew"
			if now.After(t2) {
				phase = "rebind"
			}
			rctx, cancel := context.WithDeadline(ctx, exp)
			nl, err := c.nc.Renew(rctx, c.lease)
			cancel()
			if err == nil {
				if err := c.bind(nl); err != nil {
					return err
				}
				c.log.Info("dhcp client: lease renewed", "phase", phase)
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var nak *nclient4.ErrNak
			if errors.As(err, &nak) {
				return err
			}
			wait := min(max(time.Until(exp)/2, time.Second), time.Minute)
			c.log.Warn("dhcp client: "+phase+" failed", "err", err, "retry", wait)
			if !dhcpSleep(ctx, time.Now().Add(wait)) {
				return ctx.Err()
			}
		}
	}
}

// bind puts the lease's address and default route on the interface and
// writes the lease file.
func (c *dhcpClient) bind(l *nclient4.Lease) error {
	rec, err := dhcpLeaseFrom(c.env.iface, l)
	if err != nil {
		return err
	}
	link, err := netlink.LinkByName(c.env.iface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", c.env.iface, err)
	}
	left := int(time.Until(rec.Expiry()) / time.Second)
	addr := &netlink.Addr{IPNet: ipNet(rec.Address), ValidLft: max(left, 1), PreferedLft: max(left, 1)}
	if c.addr != nil && !c.addr.Equal(*addr) {
		c.unbind()
	}
	// Lifetimes make the kernel drop the address at expiry even if this
	// process is killed.
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("add address %s to %s: %w", rec.Address, c.env.iface, err)
	}
	c.addr = addr
	if c.route != nil && !c.route.Gw.Equal(rec.Router.AsSlice()) {
		c.delRoute()
	}
	if c.route == nil && rec.Router.IsValid() {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: rec.Router.AsSlice(), Protocol: unix.RTPROT_DHCP}
		switch err := netlink.RouteAdd(r); {
		case err == nil:
			c.route = r
		case errors.Is(err, unix.EEXIST) && dhcpHasDefault(link, r.Gw):
			c.route = r // left by a client that was killed: ours now
		case errors.Is(err, unix.EEXIST):
			c.log.Warn("dhcp client: another default route exists; leaving it", "router", rec.Router)
		default:
			return fmt.Errorf("add default route via %s dev %s: %w", rec.Router, c.env.iface, err)
		}
	}
	if err := dhcpWriteLease(c.env.lease, rec); err != nil {
		return fmt.Errorf("write lease: %w", err)
	}
	if c.lease == nil || !c.lease.ACK.YourIPAddr.Equal(l.ACK.YourIPAddr) {
		c.log.Info("dhcp client: bound", "address", rec.Address, "router", rec.Router, "lease", time.Duration(rec.LeaseTime)*time.Second)
	}
	c.lease = l
	return nil
}

// dhcpHasDefault reports whether link has a default route via gw.
func dhcpHasDefault(link netlink.Link, gw net.IP) bool {
	routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(routes, func(r netlink.Route) bool {
		return (r.Dst == nil || (r.Dst.IP.IsUnspecified() && net.IP(r.Dst.Mask).IsUnspecified())) && r.Gw.Equal(gw)
	})
}

// unbind removes the route and address bind added, and the lease file.
func (c *dhcpClient) unbind() {
	c.delRoute()
	if c.addr != nil {
		if link, err := netlink.LinkByName(c.env.iface); err == nil {
			if err := netlink.AddrDel(link, c.addr); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				c.log.Warn("dhcp client: cannot remove the address", "address", c.addr.IPNet, "err", err)
			}
		}
		c.addr = nil
	}
	c.lease = nil
	if err := os.Remove(c.env.lease); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("dhcp client: cannot remove the lease file", "err", err)
	}
}

func (c *dhcpClient) delRoute() {
	if c.route == nil {
		return
	}
	if err := netlink.RouteDel(c.route); err != nil && !errors.Is(err, unix.ESRCH) {
		c.log.Warn("dhcp client: cannot remove the default route", "router", c.route.Gw, "err", err)
	}
	c.route = nil
}

// dhcpSleep waits until t; false if ctx ended first.
func dhcpSleep(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dhcpRunning returns the PID of iface's client if the pidfile names a live
// process whose environment names iface and our lease file. A zombie has an
// empty environment, so it counts as dead.
func dhcpRunning(f dhcpFiles, iface string) (int, bool) {
	b, err := os.ReadFile(f.pid)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, dhcpIsOurs(pid, f, iface)
}

func dhcpIsOurs(pid int, f dhcpFiles, iface string) bool {
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	vars := bytes.Split(environ, []byte{0})
	return slices.ContainsFunc(vars, func(v []byte) bool { return string(v) == DHCPClientEnv+"="+iface }) &&
		slices.ContainsFunc(vars, func(v []byte) bool { return string(v) == dhcpLeaseEnv+"="+f.lease })
}

// dhcpRunningClients lists the interfaces whose DHCP client runs (by
// their pidfiles under the layout, each checked as dhcpRunning does),
// sorted.
func dhcpRunningClients(layout paths.Layout) ([]string, error) {
	const prefix, suffix = "dhcp-", ".pid"
	dir := filepath.Dir(dhcpFilesFor(layout, "x").pid)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("dhcp clients: %w", err)
	}
	var ifaces []string
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		iface := strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix)
		if natCheckLinkName(iface) != nil {
			continue
		}
		if _, ok := dhcpRunning(dhcpFilesFor(layout, iface), iface); ok {
			ifaces = append(ifaces, iface)
		}
	}
	return ifaces, nil // ReadDir sorts by name
}

// ensureDHCPClient leaves a DHCP client running for iface, in the calling
// thread's network namespace. A live one is left alone (changed false);
// otherwise one is started and ensureDHCPClient waits until it holds a
// lease, or stops it and fails.
func ensureDHCPClient(ctx context.Context, log *slog.Logger, layout paths.Layout, iface string) (bool, error) {
	if err := natCheckLinkName(iface); err != nil {
		return false, fmt.Errorf("management interface: %w", err)
	}
	f := dhcpFilesFor(layout, iface)
	if pid, ok := dhcpRunning(f, iface); ok {
		log.Debug("dhcp client running", "interface", iface, "pid", pid)
		return false, nil
	}
	for _, p := range []string{f.lease, f.pid, f.log} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return false, fmt.Errorf("dhcp client on %s: %w", iface, err)
		}
	}
	// A stale lease file would pass for the new client's lease.
	if err := os.Remove(f.lease); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("dhcp client on %s: %w", iface, err)
	}
	exe, err := dhcpExecutable()
	if err != nil {
		return false, fmt.Errorf("dhcp client on %s: find own executable: %w", iface, err)
	}
	out, err := os.OpenFile(f.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return false, fmt.Errorf("dhcp client on %s: %w", iface, err)
	}
	defer out.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer null.Close()

	// it outlives this process: no ctx kills it
	cmd := reexec.Command(context.Background(), exe, dhcpMode, dhcpEnviron(f, iface))
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("dhcp client on %s: run %s: %w", iface, exe, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap it if it ends while we live
	pid := cmd.Process.Pid
	if err := atomicfile.Write(f.pid, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return false, fmt.Errorf("dhcp client on %s: %w", iface, err)
	}

	timer := time.NewTimer(dhcpStartTimeout)
	defer timer.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	why := fmt.Sprintf("no lease within %s", dhcpStartTimeout)
wait:
	for {
		if _, err := os.Stat(f.lease); err == nil {
			log.Info("started dhcp client", "interface", iface, "pid", pid, "log", f.log)
			return true, nil
		}
		select {
		case <-tick.C:
		case <-timer.C:
			break wait
		case <-exited:
			why = "the client exited (does main call reexec.Init first?)"
			break wait
		case <-ctx.Done():
			why = ctx.Err().Error()
			break wait
		}
	}
	if _, err := stopDHCPClient(layout, iface); err != nil {
		log.Warn("dhcp client: cannot stop it", "interface", iface, "err", err)
	}
	return false, fmt.Errorf("management interface %q: dhcp client (pid %d): %s; see %s", iface, pid, why, f.log)
}

// stopDHCPClient stops iface's client, if one runs: SIGTERM (it releases
// the lease and removes what it added), then SIGKILL after 3 s. The process
// is held by a pidfd before its environment is checked, so the signal can
// only reach the verified process. Whatever a killed or crashed client
// left (the lease file's address and route) is removed here. stopped is
// true when a live client was stopped.
func stopDHCPClient(layout paths.Layout, iface string) (stopped bool, err error) {
	f := dhcpFilesFor(layout, iface)
	pid, ok := dhcpRunning(f, iface)
	if !ok {
		return false, dhcpForget(f, iface)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, dhcpForget(f, iface)
	}
	if err != nil {
		return false, fmt.Errorf("dhcp client on %s (pid %d): %w", iface, pid, err)
	}
	defer unix.Close(pidfd)
	if !dhcpIsOurs(pid, f, iface) {
		return false, dhcpForget(f, iface)
	}
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		exited := false
		if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); errors.Is(err, unix.ESRCH) {
			exited = true
		} else if err != nil {
			return false, fmt.Errorf("dhcp client on %s (pid %d): signal %v: %w", iface, pid, sig, err)
		} else {
			wait := dhcpStopGrace
			if sig == unix.SIGKILL {
				wait = 2 * time.Second
			}
			if exited, err = dnsmasqWaitExit(context.Background(), pidfd, wait); err != nil {
				return false, fmt.Errorf("dhcp client on %s (pid %d): %w", iface, pid, err)
			}
		}
		if exited {
			return true, dhcpForget(f, iface)
		}
	}
	return false, fmt.Errorf("dhcp client on %s (pid %d): still running after SIGKILL", iface, pid)
}

// dhcpForget removes the files of a client that is gone and, if it left a
// lease file (killed, crashed), the address and default route it recorded.
func dhcpForget(f dhcpFiles, iface string) error {
	var errs []error
	if l, err := dhcpReadLease(f.lease); err != nil {
		errs = append(errs, err)
	} else if l != nil && l.Address.IsValid() {
		if link, err := netlink.LinkByName(iface); err == nil {
			if l.Router.IsValid() {
				r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: l.Router.AsSlice(), Protocol: unix.RTPROT_DHCP}
				if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("remove default route via %s dev %s: %w", l.Router, iface, err))
				}
			}
			if err := netlink.AddrDel(link, &netlink.Addr{IPNet: ipNet(l.Address)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("remove address %s from %s: %w", l.Address, iface, err))
			}
		}
	}
	for _, p := range []string{f.lease, f.pid} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dhcp client on %s: %w", iface, err)
	}
	return nil
}

// dhcpIface is the interface cfg wants a DHCP client on; "" for none.
func dhcpIface(cfg *Config) string {
	if cfg == nil || cfg.Management == nil || !cfg.Management.DHCP {
		return ""
	}
	return cfg.mgmtLink()
}

// dhcpPlan describes, for a dry run, what applyDHCP would do.
func dhcpPlan(layout paths.Layout, cfg, prev *Config) []string {
	var steps []string
	want, had := dhcpIface(cfg), dhcpIface(prev)
	if want != "" {
		if _, ok := dhcpRunning(dhcpFilesFor(layout, want), want); !ok {
			steps = append(steps, "start DHCP client on "+want)
		}
	}
	if had != "" && had != want {
		if _, ok := dhcpRunning(dhcpFilesFor(layout, had), had); ok {
			steps = append(steps, "stop DHCP client on "+had)
		}
	}
	return steps
}
