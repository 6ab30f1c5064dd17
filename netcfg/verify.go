package netcfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrVerify is wrapped by every Verify failure: the network did not reach
// the configured state in time.
var ErrVerify = errors.New("network check failed")

// DefaultForwardDelay is the STP forward delay the kernel gives a new
// bridge. A port with STP on listens, then learns, for one forward delay
// each before it forwards.
const DefaultForwardDelay = 15 * time.Second

// verifyPoll is how often Verify looks again at links, addresses and ports.
const verifyPoll = 100 * time.Millisecond

// Verify waits, up to timeout, until the links of cfg are up with their
// addresses, the STP ports of its bridges forward, and the management
// gateway, when there is one, answers ARP (IPv4) or neighbour discovery
// (IPv6). Ports still listening or learning are waited for, not failed on,
// so a timeout that covers STPConvergence never fails because of STP. The
// error wraps ErrVerify and lists what was still wrong.
func Verify(ctx context.Context, cfg *Config, timeout time.Duration) error {
	if cfg == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	p := newVerifyPlan(cfg)
	for {
		problems := p.check(time.Now())
		if len(problems) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %v: %s", ErrVerify, time.Since(start).Round(time.Millisecond), strings.Join(problems, "; "))
		case <-time.After(verifyPoll):
		}
	}
	m := cfg.Management
	if m == nil || m.Gateway == "" {
		return nil
	}
	gw := net.ParseIP(m.Gateway)
	if gw == nil {
		return fmt.Errorf("%w: management gateway %q is not an IP address", ErrVerify, m.Gateway)
	}
	var last error
	for {
		if last = verifyGatewayOnce(ctx, gw, p.home); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w after %v: gateway %s: %v", ErrVerify, time.Since(start).Round(time.Millisecond), gw, last)
		}
	}
}

// verifyPlan is what Verify checks, derived from a Config.
type verifyPlan struct {
	links []string            // must exist and be administratively up
	home  string              // the link carrying the management address: must have carrier
	addrs map[string][]string // link → CIDRs it must hold
	// bridges whose ports must settle (forwarding, or blocking for good).
	bridges      []string
	blockedSince map[string]time.Time
}

func newVerifyPlan(cfg *Config) *verifyPlan {
	p := &verifyPlan{addrs: map[string][]string{}, blockedSince: map[string]time.Time{}}
	// An uplink enslaved into a bridge hands its addresses to the bridge.
	portOf := map[string]string{}
	for _, b := range cfg.Bridges {
		for _, port := range b.Ports {
			portOf[port] = b.Name
		}
	}
	home := func(name string) string {
		if br, ok := portOf[name]; ok {
			return br
		}
		return name
	}
	addLink := func(name string) {
		if name != "" && !slices.Contains(p.links, name) {
			p.links = append(p.links, name)
		}
	}
	for _, b := range cfg.Bridges {
		addLink(b.Name)
		for _, port := range b.Ports {
			addLink(port)
		}
		p.addrs[b.Name] = append(p.addrs[b.Name], b.Addresses...)
		p.bridges = append(p.bridges, b.Name)
	}
	for _, v := range cfg.VLANs {
		addLink(v.Name)
		p.addrs[home(v.Name)] = append(p.addrs[home(v.Name)], v.Addresses...)
	}
	if m := cfg.Management; m != nil && m.Interface != "" {
		name := cfg.mgmtLink()
		addLink(name)
		p.home = home(name)
		addLink(p.home)
		p.addrs[p.home] = append(p.addrs[p.home], m.Addresses...)
	}
	return p
}

// check returns what is not (yet) as configured.
func (p *verifyPlan) check(now time.Time) []string {
	var problems []string
	for _, name := range p.links {
		l, err := netlink.LinkByName(name)
		switch {
		case snapNotFound(err):
			problems = append(problems, fmt.Sprintf("link %q does not exist", name))
			continue
		case err != nil:
			problems = append(problems, fmt.Sprintf("link %q: %v", name, err))
			continue
		}
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 {
			problems = append(problems, fmt.Sprintf("link %q is down", name))
		} else if name == p.home && a.OperState != netlink.OperUp && a.OperState != netlink.OperUnknown {
			problems = append(problems, fmt.Sprintf("link %q has no carrier (%s)", name, a.OperState))
		}
	}
	for _, name := range verifySortedKeys(p.addrs) {
		if len(p.addrs[name]) == 0 {
			continue
		}
		problems = append(problems, verifyAddrs(name, p.addrs[name])...)
	}
	for _, br := range p.bridges {
		problems = append(problems, p.checkPorts(br, now)...)
	}
	return problems
}

func verifySortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func verifyAddrs(name string, want []string) []string {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil // reported with the links
	}
	have, err := snapRetry(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return []string{fmt.Sprintf("link %q: addresses: %v", name, err)}
	}
	var problems []string
	for _, cidr := range want {
		w, err := netlink.ParseIPNet(cidr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("link %q: address %q: %v", name, cidr, err))
			continue
		}
		wOnes, _ := w.Mask.Size()
		i := slices.IndexFunc(have, func(a netlink.Addr) bool {
			ones, _ := a.Mask.Size()
			return a.IP.Equal(w.IP) && ones == wOnes
		})
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("address %s missing on %q", cidr, name))
		case have[i].Flags&unix.IFA_F_DADFAILED != 0:
			problems = append(problems, fmt.Sprintf("address %s on %q is used by another host (duplicate address detection failed)", cidr, name))
		}
	}
	return problems
}

// checkPorts waits for the ports of a bridge to leave STP's listening and
// learning states. A port that stays blocking longer than a forward delay
// is STP doing its job (a redundant path), not a failure.
func (p *verifyPlan) checkPorts(bridge string, now time.Time) []string {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil // reported with the links
	}
	bi, err := readBridgeAttrs(nil, br.Attrs().Index)
	if err != nil {
		return []string{fmt.Sprintf("bridge %q: %v", bridge, err)}
	}
	links, err := snapRetry(netlink.LinkList)
	if err != nil {
		return []string{fmt.Sprintf("bridge %q: list ports: %v", bridge, err)}
	}
	var problems []string
	for _, l := range links {
		a := l.Attrs()
		if a.MasterIndex != br.Attrs().Index {
			continue
		}
		pi, err := readBridgeAttrs(nil, a.Index)
		if err != nil {
			problems = append(problems, fmt.Sprintf("port %q of bridge %q: %v", a.Name, bridge, err))
			continue
		}
		switch pi.portState {
		case brPortListening, brPortLearning:
			problems = append(problems, fmt.Sprintf("port %q of bridge %q is %s (STP forwards after 2×%v)",
				a.Name, bridge, brPortStateName(pi.portState), bi.forwardDelay))
		case brPortBlocking:
			since, ok := p.blockedSince[a.Name]
			if !ok {
				since = now
				p.blockedSince[a.Name] = now
			}
			if now.Sub(since) < bi.forwardDelay+time.Second {
				problems = append(problems, fmt.Sprintf("port %q of bridge %q is blocking", a.Name, bridge))
			}
		default:
			delete(p.blockedSince, a.Name)
		}
	}
	return problems
}

// verifyGatewayOnce asks the gateway once, for at most about a second.
func verifyGatewayOnce(ctx context.Context, gw net.IP, home string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var link netlink.Link
	var src net.IP
	if gw.IsLinkLocalUnicast() && home != "" {
		l, err := netlink.LinkByName(home)
		if err != nil {
			return fmt.Errorf("link %q: %w", home, err)
		}
		link = l
	} else {
		routes, err := netlink.RouteGet(gw)
		if err != nil || len(routes) == 0 {
			return fmt.Errorf("no route: %v", err)
		}
		r := routes[0]
		if r.Gw != nil {
			return fmt.Errorf("not on a connected network (routed via %s)", r.Gw)
		}
		if link, err = netlink.LinkByIndex(r.LinkIndex); err != nil {
			return fmt.Errorf("link %d: %w", r.LinkIndex, err)
		}
		src = r.Src
	}
	a := link.Attrs()
	if gw4 := gw.To4(); gw4 != nil && len(a.HardwareAddr) == 6 && a.Flags&net.FlagUp != 0 {
		if src == nil || src.To4() == nil {
			src = verifySrc4(link, gw4)
		}
		err := verifyARP(ctx, a.Index, a.HardwareAddr, src, gw4)
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
			return err
		}
	}
	return verifyNeigh(ctx, link, gw)
}

// verifySrc4 picks the link's IPv4 address in the gateway's subnet, else its first.
func verifySrc4(link netlink.Link, gw net.IP) net.IP {
	addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
	for _, a := range addrs {
		if a.Contains(gw) {
			return a.IP.To4()
		}
	}
	if len(addrs) > 0 {
		return addrs[0].IP.To4()
	}
	return net.IPv4zero.To4() // an ARP probe (RFC 5227) still gets an answer
}

func verifyHtons(v uint16) uint16 { return v<<8 | v>>8 }

// verifyARP broadcasts ARP requests for gw on the link and waits for its
// reply: the gateway itself answering, whatever the neighbour cache holds.
func verifyARP(ctx context.Context, ifindex int, mac net.HardwareAddr, src, gw net.IP) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(verifyHtons(unix.ETH_P_ARP)))
	if err != nil {
		return fmt.Errorf("arp socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: verifyHtons(unix.ETH_P_ARP), Ifindex: ifindex}); err != nil {
		return fmt.Errorf("arp socket: bind: %w", err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("arp socket: %w", err)
	}
	req := make([]byte, 28)
	copy(req, []byte{0, 1, 8, 0, 6, 4, 0, 1}) // Ethernet, IPv4, request
	copy(req[8:14], mac)
	copy(req[14:18], src.To4())
	copy(req[24:28], gw.To4())
	to := &unix.SockaddrLinklayer{Protocol: verifyHtons(unix.ETH_P_ARP), Ifindex: ifindex, Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	buf := make([]byte, 128)
	var nextSend time.Time
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextSend) {
			if err := unix.Sendto(fd, req, 0, to); err != nil {
				return fmt.Errorf("send arp request: %w", err)
			}
			nextSend = now.Add(300 * time.Millisecond)
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("receive arp: %w", err)
		}
		if n >= 28 && buf[6] == 0 && buf[7] == 2 && net.IP(buf[14:18]).Equal(gw) {
			return nil
		}
	}
	return errors.New("no ARP reply")
}

// verifyNeigh sends a datagram to make the kernel resolve gw, then waits
// for its neighbour entry to become REACHABLE.
func verifyNeigh(ctx context.Context, link netlink.Link, gw net.IP) error {
	family := netlink.FAMILY_V6
	if gw.To4() != nil {
		family = netlink.FAMILY_V4
	}
	dst := &net.UDPAddr{IP: gw, Port: 9} // discard
	if gw.IsLinkLocalUnicast() {
		dst.Zone = link.Attrs().Name
	}
	if c, err := net.DialUDP("udp", nil, dst); err == nil {
		_, _ = c.Write([]byte{0})
		_ = c.Close()
	}
	for {
		neighs, err := netlink.NeighList(link.Attrs().Index, family)
		if err == nil {
			for _, n := range neighs {
				if n.IP.Equal(gw) && n.State&(netlink.NUD_REACHABLE|netlink.NUD_PERMANENT) != 0 {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("no neighbour answer")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// STPConvergence is how long the bridges a change involves may take to
// forward after it: twice the largest forward delay among the bridges with
// STP on that are named in links or are masters of links, and the bridges
// cfg (may be nil) turns STP on for (with the kernel default of 15 s when
// the bridge does not exist yet). Zero when no STP is involved.
func STPConvergence(cfg *Config, links []string) time.Duration {
	var worst time.Duration
	consider := func(fd time.Duration) {
		if 2*fd > worst {
			worst = 2 * fd
		}
	}
	live := func(name string) {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return
		}
		idx := []int{}
		if l.Type() == "bridge" {
			idx = append(idx, l.Attrs().Index)
		}
		if m := l.Attrs().MasterIndex; m != 0 {
			idx = append(idx, m)
		}
		for _, i := range idx {
			if bi, err := readBridgeAttrs(nil, i); err == nil && bi.stp {
				consider(bi.forwardDelay)
			}
		}
	}
	for _, name := range links {
		live(name)
	}
	if cfg == nil {
		return worst
	}
	for _, b := range cfg.Bridges {
		live(b.Name)
		for _, port := range b.Ports {
			live(port)
		}
		if !b.STP {
			continue
		}
		fd := DefaultForwardDelay
		if l, err := netlink.LinkByName(b.Name); err == nil {
			if bi, err := readBridgeAttrs(nil, l.Attrs().Index); err == nil && bi.forwardDelay > 0 {
				fd = bi.forwardDelay
			}
		}
		consider(fd)
	}
	return worst
}
