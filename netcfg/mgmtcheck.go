package netcfg

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// DefaultCheckName is the name CheckManagement asks each DNS server for.
// RFC 6761 (section 6.3) has resolvers answer "localhost." themselves,
// without asking upstream, so the check says whether the server answers,
// not whether the internet is reachable: it makes sense on an isolated
// management LAN. CheckOptions.Name asks for a real name instead.
const DefaultCheckName = "localhost."

// DefaultCheckTimeout bounds each check of CheckManagement.
const DefaultCheckTimeout = 2 * time.Second

// CheckOptions tune CheckManagement.
type CheckOptions struct {
	// Root is the host root whose etc/resolv.conf names the DNS servers
	// when the configuration has none; "" is "/".
	Root string
	// Name is what each DNS server is asked for (an A query); default
	// DefaultCheckName.
	Name string
	// Timeout bounds each check; default DefaultCheckTimeout.
	Timeout time.Duration
	// DNSPort is the DNS servers' port; default 53.
	DNSPort int
}

// CheckResult is one check of CheckManagement.
type CheckResult struct {
	Name   string        `json:"name" yaml:"name"`
	OK     bool          `json:"ok" yaml:"ok"`
	Detail string        `json:"detail" yaml:"detail"`
	Took   time.Duration `json:"took" yaml:"took"` // nanoseconds in JSON
}

// CheckManagement is "test management network": it checks, for the
// management interface of cfg, that its link is up with a carrier, that
// each configured address is present (with DHCP: that the lease gave an
// IPv4 address), that the gateway answers ARP or neighbour discovery and
// an ICMP echo, and that each DNS server (cfg's, else those of
// <Root>/etc/resolv.conf) answers a query. The checks run concurrently,
// each bounded by opts.Timeout, in the network namespace of the calling
// thread (a caller that switched namespaces must hold
// runtime.LockOSThread). Results come in a fixed order. It changes
// nothing on the host.
func CheckManagement(ctx context.Context, cfg *Config, opts CheckOptions) []CheckResult {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultCheckTimeout
	}
	if opts.Name == "" {
		opts.Name = DefaultCheckName
	}
	if opts.DNSPort == 0 {
		opts.DNSPort = 53
	}
	if opts.Root == "" {
		opts.Root = "/"
	}
	checks := managementChecks(cfg, opts)
	results := make([]CheckResult, len(checks))
	enter, done := callerNetns()
	defer done()
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			start := time.Now()
			results[i].Name = c.name
			if err := enter(); err != nil {
				results[i].Detail = err.Error()
				return
			}
			cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
			defer cancel()
			results[i].OK, results[i].Detail = c.run(cctx)
			results[i].Took = time.Since(start)
		})
	}
	wg.Wait()
	return results
}

// AllPassed reports whether every result is OK (false for none).
func AllPassed(rs []CheckResult) bool {
	for _, r := range rs {
		if !r.OK {
			return false
		}
	}
	return len(rs) > 0
}

type mgmtCheck struct {
	name string
	run  func(ctx context.Context) (ok bool, detail string)
}

func fixed(ok bool, detail string) func(context.Context) (bool, string) {
	return func(context.Context) (bool, string) { return ok, detail }
}

func managementChecks(cfg *Config, opts CheckOptions) []mgmtCheck {
	if cfg == nil || cfg.Management == nil || cfg.Management.Interface == "" {
		return []mgmtCheck{{"management", fixed(false, "no management interface in the configuration")}}
	}
	m := cfg.Management
	home := newVerifyPlan(cfg).home
	checks := []mgmtCheck{{"link " + home, func(context.Context) (bool, string) { return checkLink(home) }}}
	if m.DHCP {
		checks = append(checks, mgmtCheck{"DHCP address on " + home, func(context.Context) (bool, string) { return checkDHCPAddr(home) }})
	}
	for _, a := range m.Addresses {
		checks = append(checks, mgmtCheck{"address " + a, func(context.Context) (bool, string) {
			if p := verifyAddrs(home, []string{a}); len(p) > 0 {
				return false, strings.TrimPrefix(strings.Join(p, "; "), "address "+a+" ")
			}
			return true, "present on " + home
		}})
	}
	gw, gwErr := managementGateway(cfg, home)
	switch {
	case gwErr != nil:
		checks = append(checks, mgmtCheck{"gateway", fixed(false, gwErr.Error())})
	case gw.IsValid():
		how := "ARP"
		if gw.Is6() {
			how = "neighbour discovery"
		}
		checks = append(checks,
			mgmtCheck{"gateway " + gw.String() + " " + how, func(ctx context.Context) (bool, string) { return checkNeighbour(ctx, gw, home) }},
			mgmtCheck{"gateway " + gw.String() + " ping", func(ctx context.Context) (bool, string) { return checkPing(ctx, gw, home) }})
	}
	servers, from, err := dnsServers(cfg, opts.Root)
	switch {
	case err != nil:
		checks = append(checks, mgmtCheck{"dns", fixed(false, err.Error())})
	case len(servers) == 0:
		checks = append(checks, mgmtCheck{"dns", fixed(false, "no DNS servers in "+from)})
	}
	for _, s := range servers {
		ap := netip.AddrPortFrom(s, uint16(opts.DNSPort))
		checks = append(checks, mgmtCheck{"dns " + s.String(), func(ctx context.Context) (bool, string) { return checkDNS(ctx, ap, opts.Name) }})
	}
	return checks
}

// managementGateway is the configured gateway, or with DHCP the gateway
// of the default route on home; invalid when static without a gateway.
func managementGateway(cfg *Config, home string) (netip.Addr, error) {
	m := cfg.Management
	if !m.DHCP {
		if m.Gateway == "" {
			return netip.Addr{}, nil
		}
		gw, err := netip.ParseAddr(m.Gateway)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("management.gateway %q is not an address", m.Gateway)
		}
		return gw, nil
	}
	l, err := netlink.LinkByName(home)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("link %q: %v", home, err)
	}
	routes, err := snapRetry(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("routes of %q: %v", home, err)
	}
	for _, r := range routes {
		if (r.Dst == nil || isDefaultNet(r.Dst)) && r.Gw != nil {
			return addrOf(r.Gw), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no default route on %q: the DHCP lease gave no router, or there is no lease", home)
}

func isDefaultNet(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

func checkLink(name string) (bool, string) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if snapNotFound(err) {
			return false, "no such interface"
		}
		return false, err.Error()
	}
	a := l.Attrs()
	switch {
	case a.Flags&net.FlagUp == 0:
		return false, "administratively down"
	case a.OperState != netlink.OperUp && a.OperState != netlink.OperUnknown:
		return false, fmt.Sprintf("up, but no carrier (%s): check the cable and the switch port", a.OperState)
	}
	return true, "up, carrier"
}

func checkDHCPAddr(name string) (bool, string) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return false, err.Error()
	}
	addrs, err := snapRetry(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
	if err != nil {
		return false, err.Error()
	}
	var got []string
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			got = append(got, a.IPNet.String())
		}
	}
	if len(got) == 0 {
		return false, "no IPv4 address: no lease yet (is the DHCP server reachable?)"
	}
	return true, strings.Join(got, ", ")
}

// checkNeighbour asks the gateway by ARP (or neighbour discovery) until
// it answers or ctx ends: the same question Verify asks after an apply.
func checkNeighbour(ctx context.Context, gw netip.Addr, home string) (bool, string) {
	start := time.Now()
	ip := net.IP(gw.AsSlice())
	var last error
	for {
		attempt := time.Now()
		if last = verifyGatewayOnce(ctx, ip, home); last == nil {
			return true, "answered in " + millis(time.Since(start))
		}
		// An attempt can fail at once (no route to the gateway): space
		// them out instead of spinning until ctx ends.
		wait := time.NewTimer(max(neighbourRetry-time.Since(attempt), 0))
		select {
		case <-ctx.Done():
			wait.Stop()
			return false, last.Error()
		case <-wait.C:
		}
	}
}

// neighbourRetry is the least time between two of checkNeighbour's
// attempts.
const neighbourRetry = 200 * time.Millisecond

func checkPing(ctx context.Context, gw netip.Addr, home string) (bool, string) {
	rtt, err := ping(ctx, gw, home)
	if err != nil {
		return false, err.Error()
	}
	return true, "echo reply in " + millis(rtt)
}

// millis renders a duration in milliseconds, in ASCII (a Duration's
// String says "µs", which a serial console cannot show).
func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64) + " ms"
}

// ping sends ICMP echo requests to dst every 500 ms until one is answered
// or ctx ends. It uses a raw socket where allowed (root, CAP_NET_RAW),
// else an unprivileged ping socket (net.ipv4.ping_group_range).
func ping(ctx context.Context, dst netip.Addr, zone string) (time.Duration, error) {
	raw, dgram, wildcard, proto := "ip4:icmp", "udp4", "0.0.0.0", 1
	var echo, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() && !dst.Is4In6() {
		raw, dgram, wildcard, proto = "ip6:ipv6-icmp", "udp6", "::", 58
		echo, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	dst = dst.Unmap()
	privileged := true
	c, err := icmp.ListenPacket(raw, wildcard)
	if err != nil {
		var uerr error
		if c, uerr = icmp.ListenPacket(dgram, wildcard); uerr != nil {
			return 0, fmt.Errorf("no ICMP socket: %v; unprivileged: %v (needs root or net.ipv4.ping_group_range)", err, uerr)
		}
		privileged = false
	}
	defer c.Close()
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice()}
	if !privileged {
		to = &net.UDPAddr{IP: dst.AsSlice()}
	}
	if dst.IsLinkLocalUnicast() {
		if privileged {
			to.(*net.IPAddr).Zone = zone
		} else {
			to.(*net.UDPAddr).Zone = zone
		}
	}
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := int(binary.BigEndian.Uint16(idb[:]))
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	sent := map[int]time.Time{}
	buf := make([]byte, 1500)
	var next time.Time
	for seq := 1; ; {
		if now := time.Now(); !now.Before(next) {
			msg := icmp.Message{Type: echo, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("virtcon management test")}}
			b, err := msg.Marshal(nil)
			if err != nil {
				return 0, err
			}
			if _, err := c.WriteTo(b, to); err != nil {
				return 0, fmt.Errorf("send echo request: %w", err)
			}
			sent[seq] = now
			seq++
			next = now.Add(500 * time.Millisecond)
			_ = c.SetReadDeadline(earliest(next, ctx))
		}
		n, peer, err := c.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("no echo reply to %d request(s)", len(sent))
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return 0, fmt.Errorf("receive: %w", err)
		}
		if !samePeer(peer, dst) {
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != reply {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		// the kernel rewrites the ID of an unprivileged socket
		if !ok || (privileged && e.ID != id) {
			continue
		}
		if t, ok := sent[e.Seq]; ok {
			return time.Since(t), nil
		}
	}
}

func earliest(t time.Time, ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok && dl.Before(t) {
		return dl
	}
	return t
}

func samePeer(a net.Addr, want netip.Addr) bool {
	var ip net.IP
	switch a := a.(type) {
	case *net.IPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	default:
		return false
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == want
}

// dnsServers are cfg's DNS servers, else the nameservers of
// <root>/etc/resolv.conf; from says which.
func dnsServers(cfg *Config, root string) (servers []netip.Addr, from string, err error) {
	if len(cfg.DNS.Servers) > 0 {
		for _, s := range cfg.DNS.Servers {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, "network.yaml", fmt.Errorf("dns.servers: %q is not an address", s)
			}
			servers = append(servers, a)
		}
		return servers, "network.yaml", nil
	}
	path := filepath.Join(root, "etc", "resolv.conf")
	from = "network.yaml or " + path
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, from, nil
	} else if err != nil {
		return nil, from, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil {
				servers = append(servers, a)
			}
		}
	}
	return servers, from, sc.Err()
}

// checkDNS asks server for name's A record. Any answer of the server (the
// address, no such name, no A record) passes: the server works; no
// answer, a refusal or a server failure does not.
func checkDNS(ctx context.Context, server netip.AddrPort, name string) (bool, string) {
	rcode, addrs, err := dnsQuery(ctx, server, name)
	switch {
	case err != nil:
		return false, err.Error()
	case rcode == dnsmessage.RCodeNameError:
		return true, fmt.Sprintf("answers: %s does not exist", strings.TrimSuffix(name, "."))
	case rcode != dnsmessage.RCodeSuccess:
		return false, fmt.Sprintf("answers %s for %s", strings.TrimPrefix(rcode.String(), "RCode"), strings.TrimSuffix(name, "."))
	case len(addrs) == 0:
		return true, fmt.Sprintf("answers: %s has no IPv4 address", strings.TrimSuffix(name, "."))
	}
	return true, fmt.Sprintf("%s is %s", strings.TrimSuffix(name, "."), strings.Join(addrs, ", "))
}

// dnsQuery sends one A query over UDP, again every 500 ms, and returns the
// first matching reply's code and addresses. It is a raw query, not the
// system resolver: the Go and C resolvers answer from /etc/hosts first
// (localhost, often the host's own name) and add search domains, so they
// could pass without the server being asked.
func dnsQuery(ctx context.Context, server netip.AddrPort, name string) (dnsmessage.RCode, []string, error) {
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return 0, nil, fmt.Errorf("name %q: %w", name, err)
	}
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: qname, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	q, err := msg.Pack()
	if err != nil {
		return 0, nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", server.String())
	if err != nil {
		return 0, nil, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 1500)
	var next time.Time
	refused := false
	for {
		if now := time.Now(); !now.Before(next) {
			if _, err := conn.Write(q); err != nil {
				return 0, nil, fmt.Errorf("send: %w", err)
			}
			next = now.Add(500 * time.Millisecond)
			_ = conn.SetReadDeadline(earliest(next, ctx))
		}
		n, err := conn.Read(buf)
		if err != nil {
			switch {
			case ctx.Err() != nil && refused:
				return 0, nil, errors.New("no answer: connection refused (nothing listens on port 53?)")
			case ctx.Err() != nil:
				return 0, nil, errors.New("no answer")
			case errors.Is(err, unix.ECONNREFUSED):
				// an ICMP port unreachable: keep asking until the deadline,
				// a server may be starting
				refused = true
				_ = sleepCtx(ctx, time.Until(next))
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return 0, nil, fmt.Errorf("receive: %w", err)
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil || h.ID != id || !h.Response {
			continue
		}
		if err := p.SkipAllQuestions(); err != nil {
			continue
		}
		var addrs []string
		for {
			rh, err := p.AnswerHeader()
			if err != nil {
				break
			}
			if rh.Type != dnsmessage.TypeA {
				_ = p.SkipAnswer()
				continue
			}
			a, err := p.AResource()
			if err != nil {
				break
			}
			addrs = append(addrs, netip.AddrFrom4(a.A).String())
		}
		return h.RCode, addrs, nil
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// callerNetns returns enter, which moves the calling goroutine into the
// network namespace of the thread that called callerNetns, and done,
// which releases it. Goroutines run on threads the runtime starts from a
// template in the process's first namespace, not the caller's; a socket
// or netlink dump made there would see the wrong host. enter leaves the
// goroutine locked to its thread when it had to switch, so that thread
// dies with the goroutine instead of returning to the pool.
func callerNetns() (enter func() error, done func()) {
	orig, err := netns.Get()
	if err != nil {
		return func() error { return nil }, func() {}
	}
	return func() error {
			runtime.LockOSThread()
			cur, err := netns.Get()
			if err == nil && cur.Equal(orig) {
				cur.Close()
				runtime.UnlockOSThread()
				return nil
			}
			if err == nil {
				cur.Close()
			}
			if err := netns.Set(orig); err != nil {
				return fmt.Errorf("enter the caller's network namespace: %w", err)
			}
			return nil
		}, func() {
			orig.Close()
		}
}
