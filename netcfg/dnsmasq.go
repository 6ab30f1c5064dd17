package netcfg

// dnsmasq for nat networks: a generated conf file, a detached daemon, and
// liveness proven by pidfile + /proc/PID/cmdline (which must name our conf
// file, so a reused PID never passes for our dnsmasq).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// dnsmasqConf is everything that goes into one network's conf file.
type dnsmasqConf struct {
	Network     string
	Bridge      string
	BridgeIndex int // a recreated bridge changes the conf, so dnsmasq rebinds
	Subnet      netip.Prefix
	Gateway     netip.Addr // the bridge's address
	RangeStart  netip.Addr
	RangeEnd    netip.Addr
	LeaseTime   string
	// DNSServers set: DHCP hands them out and dnsmasq serves no DNS.
	// Empty: dnsmasq serves DNS on the bridge, forwarding to the
	// nameservers of ResolvFile, and DHCP hands out Gateway.
	DNSServers []netip.Addr
	ResolvFile string
	PIDFile    string
	LeaseFile  string
	LogFile    string
}

// render writes the conf file. Every option lives in the file rather than
// on the command line, so "the file changed" is exactly "dnsmasq must be
// restarted".
func (c dnsmasqConf) render() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# virtcon nat network %q: generated; virtcon rewrites it and restarts dnsmasq\n", c.Network)
	fmt.Fprintf(&b, "# bridge %s ifindex %d\n", c.Bridge, c.BridgeIndex)
	fmt.Fprintf(&b, "pid-file=%s\n", c.PIDFile)
	b.WriteString("bind-interfaces\n")
	fmt.Fprintf(&b, "interface=%s\n", c.Bridge)
	b.WriteString("except-interface=lo\n")
	if len(c.DNSServers) > 0 {
		// the operator's servers, straight to the guests: no DNS here
		servers := make([]string, len(c.DNSServers))
		for i, s := range c.DNSServers {
			servers[i] = s.String()
		}
		b.WriteString("port=0\n")
		b.WriteString("no-resolv\n")
		b.WriteString("no-hosts\n")
		fmt.Fprintf(&b, "dhcp-option=option:dns-server,%s\n", strings.Join(servers, ","))
	} else {
		// DNS on the bridge address only (bind-interfaces, interface=
		// above), forwarded to the host's resolvers; never the host's
		// /etc/hosts
		b.WriteString("port=53\n")
		fmt.Fprintf(&b, "resolv-file=%s\n", c.ResolvFile)
		b.WriteString("no-hosts\n")
		fmt.Fprintf(&b, "dhcp-option=option:dns-server,%s\n", c.Gateway)
	}
	fmt.Fprintf(&b, "dhcp-range=%s,%s,%s,%s\n", c.RangeStart, c.RangeEnd, natNetmask(c.Subnet), c.LeaseTime)
	b.WriteString("dhcp-authoritative\n")
	fmt.Fprintf(&b, "dhcp-leasefile=%s\n", c.LeaseFile)
	fmt.Fprintf(&b, "log-facility=%s\n", c.LogFile)
	return b.Bytes()
}

// dnsmasqArgs is the command line: the conf file holds everything else.
func dnsmasqArgs(files natFiles) []string { return []string{"--conf-file=" + files.conf} }

// dnsmasqBinary finds dnsmasq; /usr/sbin is often missing from PATH.
func dnsmasqBinary() (string, error) {
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/dnsmasq", "/sbin/dnsmasq"} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("dnsmasq not found (install dnsmasq-base)")
}

// dnsmasqRunning returns the PID of the network's dnsmasq if the pidfile
// names a live process whose command line carries our conf file. A zombie
// has an empty command line, so it counts as dead.
func dnsmasqRunning(files natFiles) (int, bool) {
	b, err := os.ReadFile(files.pid)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, dnsmasqIsOurs(pid, files)
}

func dnsmasqIsOurs(pid int, files natFiles) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	want := "--conf-file=" + files.conf
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if string(arg) == want {
			return true
		}
	}
	return false
}

// dnsmasqEnsure leaves the network's dnsmasq running with conf. Order
// matters for crash safety: stop the old one, write the conf, start — a
// crash anywhere leaves either a dead dnsmasq (started next time) or one
// running with the conf on disk.
func dnsmasqEnsure(ctx context.Context, log *slog.Logger, files natFiles, conf []byte) error {
	old, _ := os.ReadFile(files.conf)
	same := bytes.Equal(old, conf)
	if pid, ok := dnsmasqRunning(files); ok {
		if same {
			log.Debug("dnsmasq running", "pid", pid, "conf", files.conf)
			return nil
		}
		log.Info("restarting dnsmasq: configuration changed", "pid", pid, "conf", files.conf)
		if err := dnsmasqStop(ctx, log, files); err != nil {
			return err
		}
	} else {
		dnsmasqAwaitTeardown(ctx, files)
	}
	for _, dir := range []string{files.runDir, files.stateDir, filepath.Dir(files.log)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("dnsmasq: %w", err)
		}
	}
	if !same {
		if err := atomicfile.Write(files.conf, conf, 0o600); err != nil {
			return fmt.Errorf("dnsmasq: %w", err)
		}
	}
	pid, err := dnsmasqStart(ctx, files)
	if err != nil {
		return err
	}
	log.Info("started dnsmasq", "pid", pid, "conf", files.conf)
	return nil
}

// dnsmasqAwaitTeardown waits (2 s at most) for a dnsmasq that the pidfile
// names and that is dying: its command line is gone already, but until it
// has exited its sockets still hold the addresses a new one must bind. A
// PID reused by another program (a command line of its own) is not waited
// for.
func dnsmasqAwaitTeardown(ctx context.Context, files natFiles) {
	b, err := os.ReadFile(files.pid)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(pidfd)
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || len(cmdline) > 0 {
		return // gone, or alive as some other program
	}
	_, _ = dnsmasqWaitExit(ctx, pidfd, 2*time.Second)
}

// dnsmasqStart runs dnsmasq as a daemon: it forks into its own session and
// its first process exits once the daemon is ready (or with the error), so
// when Run returns the pidfile is written. Nothing ties the daemon to us:
// the CLI exiting does not stop it.
func dnsmasqStart(ctx context.Context, files natFiles) (int, error) {
	bin, err := dnsmasqBinary()
	if err != nil {
		return 0, err
	}
	// A stale pidfile could name someone else's process by now.
	if err := os.Remove(files.pid); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("dnsmasq: %w", err)
	}
	// A file, not a pipe: the daemon inherits stderr, and a pipe would keep
	// Run waiting for it.
	errf, err := os.CreateTemp(files.runDir, ".dnsmasq-stderr-*")
	if err != nil {
		return 0, fmt.Errorf("dnsmasq: %w", err)
	}
	defer os.Remove(errf.Name())
	defer errf.Close()

	cmd := exec.CommandContext(ctx, bin, dnsmasqArgs(files)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout = errf
	cmd.Stderr = errf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		msg, _ := io.ReadAll(io.NewSectionReader(errf, 0, 4096))
		return 0, fmt.Errorf("dnsmasq: %w: %s", err, strings.TrimSpace(string(msg)))
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if pid, ok := dnsmasqRunning(files); ok {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("dnsmasq: started, but %s names no live dnsmasq with %s", files.pid, files.conf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dnsmasqStop ends the network's dnsmasq: SIGTERM, then SIGKILL after 5 s.
// The process is held by a pidfd before its command line is checked, so
// the signal can only reach the process that was verified.
func dnsmasqStop(ctx context.Context, log *slog.Logger, files natFiles) error {
	pid, ok := dnsmasqRunning(files)
	if !ok {
		return dnsmasqForgetPID(files)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return dnsmasqForgetPID(files)
	}
	if err != nil {
		return fmt.Errorf("dnsmasq pid %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	if !dnsmasqIsOurs(pid, files) {
		return dnsmasqForgetPID(files)
	}
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		exited := false
		if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); errors.Is(err, unix.ESRCH) {
			exited = true
		} else if err != nil {
			return fmt.Errorf("dnsmasq pid %d: signal %v: %w", pid, sig, err)
		} else {
			wait := 5 * time.Second
			if sig == unix.SIGKILL {
				wait = 2 * time.Second
			}
			if exited, err = dnsmasqWaitExit(ctx, pidfd, wait); err != nil {
				return fmt.Errorf("dnsmasq pid %d: %w", pid, err)
			}
		}
		if exited {
			log.Info("stopped dnsmasq", "pid", pid, "signal", sig.String())
			return dnsmasqForgetPID(files)
		}
	}
	return fmt.Errorf("dnsmasq pid %d: still running after SIGKILL", pid)
}

// dnsmasqForgetPID removes the pidfile of a dnsmasq that is gone.
func dnsmasqForgetPID(files natFiles) error {
	if err := os.Remove(files.pid); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("dnsmasq: %w", err)
	}
	return nil
}

// dnsmasqWaitExit waits until the process behind pidfd has exited (a pidfd
// becomes readable then, child of ours or not).
func dnsmasqWaitExit(ctx context.Context, pidfd int, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return true, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
	}
}

// Lease is one DHCP lease handed out by a nat network's dnsmasq.
type Lease struct {
	MAC      string     `json:"mac"` // lower case, colon separated
	IP       netip.Addr `json:"ip"`
	Hostname string     `json:"hostname,omitempty"` // as the guest sent it; empty if none
	Expiry   time.Time  `json:"expiry"`             // zero: never expires
}

// NATLeases reads the leases of the nat network name. A network that has
// handed out no lease yet (or does not exist) has none: nil, nil.
func NATLeases(layout paths.Layout, name string) ([]Lease, error) {
	if err := natCheckName(name); err != nil {
		return nil, err
	}
	path := natFilesFor(layout, name).leases
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nat network %q: leases: %w", name, err)
	}
	defer f.Close()
	leases, err := parseDnsmasqLeases(f)
	if err != nil {
		return nil, fmt.Errorf("nat network %q: leases %s: %w", name, path, err)
	}
	return leases, nil
}

// parseDnsmasqLeases reads dnsmasq's lease file: one IPv4 lease a line,
// "EXPIRY MAC IP HOSTNAME CLIENTID" ("*" for an unknown field, expiry 0 for
// an infinite lease). A "duid" line starts the DHCPv6 leases, which are
// skipped; so are leases of non-Ethernet hardware ("TYPE-MAC").
func parseDnsmasqLeases(r io.Reader) ([]Lease, error) {
	var leases []Lease
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "duid" {
			break
		}
		if len(fields) < 4 {
			return nil, fmt.Errorf("line %d: %d fields, want at least 4", line, len(fields))
		}
		exp, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: expiry %q: not a number", line, fields[0])
		}
		ip, err := netip.ParseAddr(fields[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: address %q: %w", line, fields[2], err)
		}
		mac, err := net.ParseMAC(fields[1])
		if err != nil || len(mac) != 6 {
			continue // another hardware type: no MAC a VM manifest could name
		}
		l := Lease{MAC: mac.String(), IP: ip}
		if fields[3] != "*" {
			l.Hostname = fields[3]
		}
		if exp != 0 {
			l.Expiry = time.Unix(exp, 0)
		}
		leases = append(leases, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return leases, nil
}
