package netcfg

// NAT networks: a bridge that virtcon creates, carrying the first address of
// a private subnet; dnsmasq handing out the upper half of the subnet by DHCP;
// nftables masquerading the subnet's traffic to the rest of the world.
//
// virtcon has no daemon, so nothing supervises dnsmasq continuously: every
// EnsureNAT checks it (pidfile, then /proc/PID/cmdline naming our conf file)
// and starts or restarts it as needed. Everything here acts on the calling
// thread's network namespace; callers that switch namespaces must lock the
// OS thread.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/revert"
	"github.com/virtcon/virtcon/paths"
)

// natType is Network.Type of a nat network (NetworkNAT in validate.go).
const natType = "nat"

// natLeaseTime is how long a DHCP lease lasts; guests renew at half of it.
const natLeaseTime = "12h"

// NATOptions are the knobs of a nat network that network.yaml does not carry.
type NATOptions struct {
	// DNSServers, when set, are handed to the guests by DHCP as their
	// resolvers, and dnsmasq serves no DNS (network.yaml's dns.servers,
	// the operator's explicit choice). When empty, dnsmasq answers DNS on
	// the bridge address (and nowhere else), forwarding to the host's
	// resolvers (the nameservers of ResolvFile), and DHCP hands out the
	// bridge address, as libvirt's default network does.
	DNSServers []netip.Addr
	// ResolvFile is where dnsmasq reads the host's resolvers (re-read when
	// it changes); "" is <root>/etc/resolv.conf of the layout. Loopback
	// resolvers there (127.0.0.53 of systemd-resolved) work: dnsmasq runs
	// in the host's network namespace.
	ResolvFile string
}

// EnsureNAT makes the nat network n exist in the current network namespace:
// the bridge with the subnet's first address, up; IPv4 forwarding on; the
// nftables masquerade and forward rules; dnsmasq running with the current
// configuration (restarted if it died or its configuration changed). It is
// idempotent: a second call changes nothing. A failure leaves nothing that
// this call created.
func EnsureNAT(ctx context.Context, log *slog.Logger, layout paths.Layout, n Network) error {
	return EnsureNATWith(ctx, log, layout, n, NATOptions{})
}

// EnsureNATWith is EnsureNAT with options.
func EnsureNATWith(ctx context.Context, log *slog.Logger, layout paths.Layout, n Network, opts NATOptions) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := ensureNAT(ctx, log, layout, n, opts); err != nil {
		return fmt.Errorf("nat network %q: %w", n.Name, err)
	}
	return nil
}

func ensureNAT(ctx context.Context, log *slog.Logger, layout paths.Layout, n Network, opts NATOptions) error {
	if n.Type != natType {
		return fmt.Errorf("%w: type is %q, want %q", ErrInvalid, n.Type, natType)
	}
	if err := natCheckName(n.Name); err != nil {
		return err
	}
	if err := natCheckLinkName(n.Bridge); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	subnet, err := natParseSubnet(n.Subnet)
	if err != nil {
		return err
	}
	gw := netip.PrefixFrom(natGateway(subnet), subnet.Bits())
	start, end := natDHCPRange(subnet)
	files := natFilesFor(layout, n.Name)

	lock, err := flock.Acquire(ctx, files.lock)
	if err != nil {
		return err
	}
	defer lock.Release()

	r := revert.New()
	defer r.Fail()

	br, created, err := natEnsureBridge(log, n.Name, n.Bridge, gw)
	if err != nil {
		return err
	}
	if created {
		r.Add(func() error { return netlink.LinkDel(br) })
	}
	if err := natEnableForwarding(log); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	nftCreated, err := nftEnsureNAT(ctx, log, layout, n.Name, n.Bridge, subnet)
	if err != nil {
		return err
	}
	if nftCreated {
		r.Add(func() error { return nftRemoveNAT(context.Background(), log, layout, n.Name) })
	}
	conf := dnsmasqConf{
		Network:     n.Name,
		Bridge:      n.Bridge,
		BridgeIndex: br.Attrs().Index,
		Subnet:      subnet,
		Gateway:     gw.Addr(),
		RangeStart:  start,
		RangeEnd:    end,
		LeaseTime:   natLeaseTime,
		DNSServers:  opts.DNSServers,
		PIDFile:     files.pid,
		LeaseFile:   files.leases,
		LogFile:     files.log,
	}
	if len(opts.DNSServers) == 0 {
		// dnsmasq runs in /: a relative root must not reach it as is
		resolv := opts.ResolvFile
		if resolv == "" {
			resolv = hostResolvFile(layout)
		}
		if conf.ResolvFile, err = filepath.Abs(resolv); err != nil {
			return err
		}
		// dnsmasq waits for a missing file (it watches the directory),
		// but refuses to start without its directory
		if err := os.MkdirAll(filepath.Dir(conf.ResolvFile), 0o755); err != nil {
			return fmt.Errorf("dnsmasq: resolver file: %w", err)
		}
	}
	if err := dnsmasqEnsure(ctx, log, files, conf.render()); err != nil {
		return err
	}
	r.Success()
	return nil
}

// RemoveNAT undoes EnsureNAT: it stops the network's dnsmasq (only the
// process our pidfile and conf path prove to be ours), removes the
// network's nftables chains (and the virtcon table once it is empty),
// deletes the bridge and the network's runtime files and leases. The log
// stays. Removing what is already gone is not an error; each step runs even
// if an earlier one failed, and the errors are joined.
func RemoveNAT(ctx context.Context, log *slog.Logger, layout paths.Layout, name, bridge string) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := removeNAT(ctx, log, layout, name, bridge); err != nil {
		return fmt.Errorf("nat network %q: remove: %w", name, err)
	}
	return nil
}

func removeNAT(ctx context.Context, log *slog.Logger, layout paths.Layout, name, bridge string) error {
	if err := natCheckName(name); err != nil {
		return err
	}
	if err := natCheckLinkName(bridge); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	files := natFilesFor(layout, name)
	lock, err := flock.Acquire(ctx, files.lock)
	if err != nil {
		return err
	}
	defer lock.Release()

	var errs []error
	if err := dnsmasqStop(ctx, log, files); err != nil {
		errs = append(errs, err)
	}
	if err := nftRemoveNAT(ctx, log, layout, name); err != nil {
		errs = append(errs, err)
	}
	if err := natDeleteBridge(log, bridge); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range []string{files.runDir, files.stateDir} {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostResolvFile is the host's resolver file under the layout's root, the
// one applySystem writes from dns.
func hostResolvFile(layout paths.Layout) string {
	return filepath.Join(layout.Root, "etc", "resolv.conf")
}

// natFiles are the files of one nat network.
type natFiles struct {
	runDir   string // conf and pidfile: gone at reboot, like dnsmasq
	conf     string
	pid      string
	stateDir string // leases survive a reboot so guests keep their addresses
	leases   string
	log      string
	lock     string // outside runDir: removing a lock file breaks flock
}

func natFilesFor(layout paths.Layout, name string) natFiles {
	run := filepath.Join(layout.RunDir(), "network", name)
	state := filepath.Join(layout.NetworkDir(), name)
	return natFiles{
		runDir:   run,
		conf:     filepath.Join(run, "dnsmasq.conf"),
		pid:      filepath.Join(run, "dnsmasq.pid"),
		stateDir: state,
		leases:   filepath.Join(state, "leases"),
		log:      filepath.Join(layout.LogDir(), "network-"+name+".log"),
		lock:     filepath.Join(layout.RunDir(), "locks", "network-"+name+".lock"),
	}
}

// natCheckName refuses a network name that cannot be a path component, an
// nftables chain name suffix and a dnsmasq conf value at once.
func natCheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: network name %q: want 1 to 64 characters", ErrInvalid, name)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("%w: network name %q: only letters, digits, '-', '_' and '.' are allowed", ErrInvalid, name)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: network name %q", ErrInvalid, name)
	}
	return nil
}

// natCheckLinkName refuses what the kernel would refuse as an interface
// name, before anything is changed.
func natCheckLinkName(name string) error {
	if name == "" || len(name) > unix.IFNAMSIZ-1 {
		return fmt.Errorf("%w: link name %q: want 1 to %d bytes", ErrInvalid, name, unix.IFNAMSIZ-1)
	}
	if name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\x00") {
		return fmt.Errorf("%w: link name %q: contains '/', ':' or white space", ErrInvalid, name)
	}
	return nil
}

// natParseSubnet parses a nat network's subnet: IPv4, written as its
// network address, with room for the bridge and at least one guest (/30).
func natParseSubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: subnet %q: not a CIDR prefix", ErrInvalid, s)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%w: subnet %q: only IPv4 nat networks are supported", ErrInvalid, s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%w: subnet %q has host bits set; want %s", ErrInvalid, s, p.Masked())
	}
	if p.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("%w: subnet %q is too small: want /30 or larger (a bridge address and a guest)", ErrInvalid, s)
	}
	return p, nil
}

// natGateway is the bridge's address: the subnet's first host address.
func natGateway(p netip.Prefix) netip.Addr { return p.Addr().Next() }

// natDHCPRange is the upper half of the subnet without the broadcast
// address; the lower half stays free for static addresses. For a /30 that is
// the single address after the bridge's.
func natDHCPRange(p netip.Prefix) (start, end netip.Addr) {
	base := natU32(p.Addr())
	size := uint32(1) << (32 - p.Bits())
	return natAddr(base + size/2), natAddr(base + size - 2)
}

// natNetmask is the dotted netmask of p, for dnsmasq.
func natNetmask(p netip.Prefix) netip.Addr {
	return natAddr(^uint32(0) << (32 - p.Bits()))
}

func natU32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func natAddr(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// natBridgeAlias marks a bridge that EnsureNAT created (ip link shows it).
func natBridgeAlias(network string) string { return "virtcon nat " + network }

// natEnsureBridge makes the bridge exist, carry exactly the IPv4 address gw
// and be up. created says whether this call created it.
func natEnsureBridge(log *slog.Logger, network, name string, gw netip.Prefix) (link netlink.Link, created bool, err error) {
	link, err = netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		br := &netlink.Bridge{LinkAttrs: netlink.NewLinkAttrs()}
		br.Name = name
		if err := netlink.LinkAdd(br); err != nil {
			return nil, false, fmt.Errorf("create bridge %s: %w", name, err)
		}
		created = true
		log.Info("created bridge", "network", network, "bridge", name)
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, false, fmt.Errorf("bridge %s: %w", name, err)
		}
	case err != nil:
		return nil, false, fmt.Errorf("bridge %s: %w", name, err)
	case link.Type() != "bridge":
		return nil, false, fmt.Errorf("%w: link %s exists and is a %s, not a bridge", ErrInvalid, name, link.Type())
	}
	fail := func(err error) (netlink.Link, bool, error) {
		if created {
			_ = netlink.LinkDel(link)
		}
		return nil, false, err
	}
	if created {
		if err := netlink.LinkSetAlias(link, natBridgeAlias(network)); err != nil {
			return fail(fmt.Errorf("bridge %s: set alias: %w", name, err))
		}
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fail(fmt.Errorf("bridge %s: list addresses: %w", name, err))
	}
	have := false
	for _, a := range addrs {
		p, ok := natAddrPrefix(a.IPNet)
		if ok && p == gw {
			have = true
			continue
		}
		// The bridge belongs to the nat network: an address from an
		// earlier subnet would keep routing the old subnet here.
		if err := netlink.AddrDel(link, &a); err != nil {
			return fail(fmt.Errorf("bridge %s: remove stale address %s: %w", name, a.IPNet, err))
		}
		log.Info("removed stale bridge address", "network", network, "bridge", name, "address", a.IPNet.String())
	}
	if !have {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: gw.Addr().AsSlice(), Mask: net.CIDRMask(gw.Bits(), 32)}}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fail(fmt.Errorf("bridge %s: add address %s: %w", name, gw, err))
		}
		log.Info("added bridge address", "network", network, "bridge", name, "address", gw.String())
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return fail(fmt.Errorf("bridge %s: set up: %w", name, err))
		}
	}
	return link, created, nil
}

func natAddrPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// natDeleteBridge deletes the bridge if it exists; a link of that name that
// is not a bridge is left alone.
func natDeleteBridge(log *slog.Logger, name string) error {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bridge %s: %w", name, err)
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("%w: link %s is a %s, not a bridge: not deleted", ErrInvalid, name, link.Type())
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("delete bridge %s: %w", name, err)
	}
	log.Info("deleted bridge", "bridge", name)
	return nil
}

// natForwardingSysctl is per network namespace: opened from the calling
// thread, it acts on that thread's namespace.
const natForwardingSysctl = "/proc/sys/net/ipv4/ip_forward"

// natEnableForwarding turns IPv4 forwarding on. RemoveNAT never turns it off:
// other networks, or the administrator, may rely on it.
func natEnableForwarding(log *slog.Logger) error {
	b, err := os.ReadFile(natForwardingSysctl)
	if err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(natForwardingSysctl, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	log.Info("enabled IPv4 forwarding")
	return nil
}
