package netcfg

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// fakeDNS answers A queries on a loopback UDP port: with addr for want,
// with rcode otherwise; silent when rcode is -1.
func fakeDNS(t *testing.T, want string, addr [4]byte, rcode int) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if rcode < 0 {
				continue
			}
			var req dnsmessage.Message
			if err := req.Unpack(buf[:n]); err != nil || len(req.Questions) != 1 {
				continue
			}
			q := req.Questions[0]
			resp := dnsmessage.Message{Header: dnsmessage.Header{ID: req.ID, Response: true, RCode: dnsmessage.RCode(rcode)}, Questions: req.Questions}
			if q.Name.String() == want && q.Type == dnsmessage.TypeA {
				resp.RCode = dnsmessage.RCodeSuccess
				resp.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
					Body:   &dnsmessage.AResource{A: addr},
				}}
			}
			b, err := resp.Pack()
			if err == nil {
				_, _ = pc.WriteTo(b, from)
			}
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

func TestCheckDNS(t *testing.T) {
	tests := []struct {
		name   string
		rcode  int
		query  string
		ok     bool
		detail string
	}{
		{"answer", int(dnsmessage.RCodeSuccess), "virtcon.test", true, "virtcon.test is 10.0.0.1"},
		{"fully qualified query", int(dnsmessage.RCodeSuccess), "virtcon.test.", true, "virtcon.test is 10.0.0.1"},
		{"no such name is an answer", int(dnsmessage.RCodeNameError), "other.test", true, "other.test does not exist"},
		{"no A record is an answer", int(dnsmessage.RCodeSuccess), "other.test", true, "has no IPv4 address"},
		{"refused", int(dnsmessage.RCodeRefused), "other.test", false, "answers Refused"},
		{"server failure", int(dnsmessage.RCodeServerFailure), "other.test", false, "answers ServerFailure"},
		{"silent", -1, "virtcon.test", false, "no answer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := fakeDNS(t, "virtcon.test.", [4]byte{10, 0, 0, 1}, tc.rcode)
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			ok, detail := checkDNS(ctx, srv, tc.query)
			if ok != tc.ok || !strings.Contains(detail, tc.detail) {
				t.Errorf("checkDNS = %t, %q; want %t, …%q…", ok, detail, tc.ok, tc.detail)
			}
		})
	}
}

// A closed port answers with ICMP port unreachable: reported as such once
// the check's time is up.
func TestCheckDNSClosedPort(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := netip.MustParseAddrPort(pc.LocalAddr().String())
	pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if ok, detail := checkDNS(ctx, srv, "x.test"); ok || !strings.Contains(detail, "refused") {
		t.Errorf("checkDNS(closed port) = %t, %q; want a failure saying refused", ok, detail)
	}
}

func TestDNSServers(t *testing.T) {
	root := t.TempDir()
	cfg := &Config{}
	if s, from, err := dnsServers(cfg, root); err != nil || len(s) != 0 || !strings.Contains(from, "resolv.conf") {
		t.Errorf("dnsServers(no file) = %v, %q, %v; want none, from resolv.conf", s, from, err)
	}
	writeTestFile(t, filepath.Join(root, "etc", "resolv.conf"), "# c\nsearch lab\nnameserver 192.0.2.53\nnameserver bogus\nnameserver 2001:db8::53\n")
	s, _, err := dnsServers(cfg, root)
	if want := []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("2001:db8::53")}; err != nil || !slices.Equal(s, want) {
		t.Errorf("dnsServers(resolv.conf) = %v, %v; want %v", s, err, want)
	}
	cfg.DNS.Servers = []string{"198.51.100.53"}
	s, from, err := dnsServers(cfg, root)
	if err != nil || len(s) != 1 || s[0].String() != "198.51.100.53" || from != "network.yaml" {
		t.Errorf("dnsServers(cfg) = %v, %q, %v; want the file's server", s, from, err)
	}
}

func TestCheckManagementNoManagement(t *testing.T) {
	for _, cfg := range []*Config{nil, {APIVersion: APIVersion, Kind: Kind}} {
		rs := CheckManagement(context.Background(), cfg, CheckOptions{})
		if len(rs) != 1 || rs[0].OK || !strings.Contains(rs[0].Detail, "no management interface") {
			t.Errorf("CheckManagement(%v) = %+v; want one failure: no management interface", cfg, rs)
		}
		if AllPassed(rs) {
			t.Error("AllPassed with a failure")
		}
	}
	if AllPassed(nil) {
		t.Error("AllPassed(nil) = true; want false: nothing was checked")
	}
}

// The checks planned for a configuration, by name and in order: the DNS
// check of a configuration without servers reads resolv.conf under Root.
func TestManagementChecks(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name string
		cfg  *Config
		want []string
	}{
		{"static", testConfig(), []string{"link eth0", "address 192.0.2.10/24", "gateway 192.0.2.1 ARP", "gateway 192.0.2.1 ping", "dns 192.0.2.53"}},
		{"static on a bridge port's bridge, v6 gateway, no DNS", &Config{
			Management: &Management{Interface: "br0", Addresses: []string{"2001:db8::5/64"}, Gateway: "2001:db8::1"},
			Bridges:    []Bridge{{Name: "br0", Ports: []string{"eth1"}}},
		}, []string{"link br0", "address 2001:db8::5/64", "gateway 2001:db8::1 neighbour discovery", "gateway 2001:db8::1 ping", "dns"}},
		{"no gateway", &Config{Management: &Management{Interface: "eth0", Addresses: []string{"192.0.2.10/24"}}, DNS: DNS{Servers: []string{"192.0.2.53"}}},
			[]string{"link eth0", "address 192.0.2.10/24", "dns 192.0.2.53"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range managementChecks(tc.cfg, CheckOptions{Root: root, DNSPort: 53}) {
				got = append(got, c.name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("checks = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestPingLoopback: an echo to 127.0.0.1 is answered, through whichever
// ICMP socket this process may open.
func TestPingLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rtt, err := ping(ctx, netip.MustParseAddr("127.0.0.1"), "")
	if err != nil && strings.Contains(err.Error(), "no ICMP socket") {
		t.Skipf("this process may open no ICMP socket (uid %d): %v", os.Getuid(), err)
	}
	if err != nil || rtt <= 0 {
		t.Errorf("ping(127.0.0.1) = %v, %v; want a reply", rtt, err)
	}
}
