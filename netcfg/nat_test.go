package netcfg

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

func TestNATSubnetMath(t *testing.T) {
	tests := []struct {
		subnet            string
		gateway           string
		start, end, nmask string
	}{
		{"10.77.0.0/24", "10.77.0.1", "10.77.0.128", "10.77.0.254", "255.255.255.0"},
		{"10.77.0.0/16", "10.77.0.1", "10.77.128.0", "10.77.255.254", "255.255.0.0"},
		{"192.168.100.0/25", "192.168.100.1", "192.168.100.64", "192.168.100.126", "255.255.255.128"},
		{"10.0.0.0/8", "10.0.0.1", "10.128.0.0", "10.255.255.254", "255.0.0.0"},
		{"10.77.0.4/30", "10.77.0.5", "10.77.0.6", "10.77.0.6", "255.255.255.252"},
		{"172.16.0.0/29", "172.16.0.1", "172.16.0.4", "172.16.0.6", "255.255.255.248"},
	}
	for _, tt := range tests {
		p, err := natParseSubnet(tt.subnet)
		if err != nil {
			t.Errorf("natParseSubnet(%q): %v", tt.subnet, err)
			continue
		}
		if got := natGateway(p).String(); got != tt.gateway {
			t.Errorf("%s: gateway %s; want %s", tt.subnet, got, tt.gateway)
		}
		start, end := natDHCPRange(p)
		if start.String() != tt.start || end.String() != tt.end {
			t.Errorf("%s: range %s-%s; want %s-%s", tt.subnet, start, end, tt.start, tt.end)
		}
		if got := natNetmask(p).String(); got != tt.nmask {
			t.Errorf("%s: netmask %s; want %s", tt.subnet, got, tt.nmask)
		}
		if gw := natGateway(p); !(gw.Less(start) && p.Contains(end)) {
			t.Errorf("%s: gateway %s not below range %s-%s inside the subnet", tt.subnet, gw, start, end)
		}
	}
}

func TestNATSubnetRefused(t *testing.T) {
	tests := []struct{ subnet, want string }{
		{"10.77.0.0/31", "too small"},
		{"10.77.0.1/32", "too small"},
		{"10.77.0.5/24", "host bits set; want 10.77.0.0/24"},
		{"fd00::/64", "only IPv4"},
		{"10.77.0.0", "not a CIDR"},
		{"", "not a CIDR"},
		{"10.77.0.0/33", "not a CIDR"},
	}
	for _, tt := range tests {
		_, err := natParseSubnet(tt.subnet)
		if err == nil {
			t.Errorf("natParseSubnet(%q) succeeded; want an error with %q", tt.subnet, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("natParseSubnet(%q) = %v; want ErrInvalid mentioning %q", tt.subnet, err, tt.want)
		}
	}
}

func TestNATNames(t *testing.T) {
	for _, ok := range []string{"default", "lab-1", "a.b_c"} {
		if err := natCheckName(ok); err != nil {
			t.Errorf("natCheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "with space", strings.Repeat("n", 65)} {
		if err := natCheckName(bad); err == nil {
			t.Errorf("natCheckName(%q) succeeded; want an error", bad)
		}
	}
	for _, bad := range []string{"", "sixteen-bytes-xx", "a/b", "a:b", "a b"} {
		if err := natCheckLinkName(bad); err == nil {
			t.Errorf("natCheckLinkName(%q) succeeded; want an error", bad)
		}
	}
}

func TestNATFiles(t *testing.T) {
	f := natFilesFor(paths.New("/r"), "default")
	got := map[string]string{"conf": f.conf, "pid": f.pid, "leases": f.leases, "log": f.log, "lock": f.lock}
	want := map[string]string{
		"conf":   "/r/run/virtcon/network/default/dnsmasq.conf",
		"pid":    "/r/run/virtcon/network/default/dnsmasq.pid",
		"leases": "/r/var/lib/virtcon/network/default/leases",
		"log":    "/r/var/log/virtcon/network-default.log",
		"lock":   "/r/run/virtcon/locks/network-default.lock",
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s = %s; want %s", k, got[k], want[k])
		}
	}
	if args := strings.Join(dnsmasqArgs(f), " "); args != "--conf-file=/r/run/virtcon/network/default/dnsmasq.conf" {
		t.Errorf("dnsmasq args %q", args)
	}
}

func testDnsmasqConf() dnsmasqConf {
	p := netip.MustParsePrefix("10.77.0.0/24")
	start, end := natDHCPRange(p)
	f := natFilesFor(paths.New("/r"), "default")
	return dnsmasqConf{
		Network: "default", Bridge: "virbr7", BridgeIndex: 42, Subnet: p, Gateway: natGateway(p),
		RangeStart: start, RangeEnd: end, LeaseTime: natLeaseTime,
		PIDFile: f.pid, LeaseFile: f.leases, LogFile: f.log,
	}
}

func TestDnsmasqConf(t *testing.T) {
	head := []string{
		`# virtcon nat network "default": generated; virtcon rewrites it and restarts dnsmasq`,
		`# bridge virbr7 ifindex 42`,
		`pid-file=/r/run/virtcon/network/default/dnsmasq.pid`,
		`bind-interfaces`,
		`interface=virbr7`,
		`except-interface=lo`,
	}
	tail := []string{
		`dhcp-range=10.77.0.128,10.77.0.254,255.255.255.0,12h`,
		`dhcp-authoritative`,
		`dhcp-leasefile=/r/var/lib/virtcon/network/default/leases`,
		`log-facility=/r/var/log/virtcon/network-default.log`,
	}
	dns := []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("198.51.100.53")}
	tests := []struct {
		name    string
		servers []netip.Addr
		middle  []string
	}{
		// the default: DNS on the bridge address, forwarded to the
		// host's resolvers, and the bridge address handed out
		{"dns forwarding to the host's resolvers", nil, []string{"port=53", "resolv-file=/r/etc/resolv.conf", "no-hosts",
			"dhcp-option=option:dns-server,10.77.0.1"}},
		// dns.servers of network.yaml: handed out as they are
		{"dhcp hands out servers", dns, []string{"port=0", "no-resolv", "no-hosts",
			"dhcp-option=option:dns-server,192.0.2.53,198.51.100.53"}},
	}
	for _, tt := range tests {
		c := testDnsmasqConf()
		c.DNSServers, c.ResolvFile = tt.servers, "/r/etc/resolv.conf"
		want := strings.Join(append(append(append([]string{}, head...), tt.middle...), tail...), "\n") + "\n"
		if got := string(c.render()); got != want {
			t.Errorf("%s: conf\n%s\nwant\n%s", tt.name, got, want)
		}
	}
}

func TestDnsmasqConfChangesWithBridge(t *testing.T) {
	a := testDnsmasqConf()
	b := a
	b.BridgeIndex = 43
	if string(a.render()) == string(b.render()) {
		t.Error("a recreated bridge (new ifindex) leaves the conf unchanged; dnsmasq would not rebind")
	}
}

func TestParseDnsmasqLeases(t *testing.T) {
	in := `1700000000 52:54:00:AA:bb:01 10.77.0.200 guest-1 01:52:54:00:aa:bb:01
0 52:54:00:aa:bb:02 10.77.0.201 * *

1700000600 20-80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:01:02:03 10.77.0.202 ib *
duid 00:01:00:01:2c:2f:11:22:52:54:00:00:00:01
1700000000 1234 fd00::5 v6guest 00:01:00:01
`
	got, err := parseDnsmasqLeases(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Lease{
		{MAC: "52:54:00:aa:bb:01", IP: netip.MustParseAddr("10.77.0.200"), Hostname: "guest-1", Expiry: time.Unix(1700000000, 0)},
		{MAC: "52:54:00:aa:bb:02", IP: netip.MustParseAddr("10.77.0.201")},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d leases %+v; want %d", len(got), got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.MAC != w.MAC || g.IP != w.IP || g.Hostname != w.Hostname || !g.Expiry.Equal(w.Expiry) {
			t.Errorf("lease %d: got %+v; want %+v", i, g, w)
		}
	}
}

func TestParseDnsmasqLeasesBad(t *testing.T) {
	for _, in := range []string{
		"1700000000 52:54:00:aa:bb:01 10.77.0.200\n",
		"soon 52:54:00:aa:bb:01 10.77.0.200 * *\n",
		"1700000000 52:54:00:aa:bb:01 10.77.0.300 * *\n",
	} {
		if got, err := parseDnsmasqLeases(strings.NewReader(in)); err == nil {
			t.Errorf("parseDnsmasqLeases(%q) = %+v; want an error", in, got)
		}
	}
}

func TestNATLeasesMissingFile(t *testing.T) {
	got, err := NATLeases(paths.New(t.TempDir()), "none")
	if err != nil || got != nil {
		t.Errorf("NATLeases without a lease file = %v, %v; want nil, nil", got, err)
	}
}

func TestNFTRulesComments(t *testing.T) {
	nat, fwd := nftNATRules("default", "virbr7", netip.MustParsePrefix("10.77.0.0/24"))
	var got []string
	for _, r := range append(nat, fwd...) {
		got = append(got, r.comment)
	}
	want := []string{
		"virtcon nat default: masquerade 10.77.0.0/24",
		"virtcon nat default: accept from virbr7",
		"virtcon nat default: accept replies to virbr7",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rule comments %q; want %q", got, want)
	}
	natChain, fwdChain := nftChains("default")
	if natChain.Name != "nat-default" || fwdChain.Name != "fwd-default" || natChain.Table.Name != "virtcon" {
		t.Errorf("chains %s/%s in table %s", natChain.Name, fwdChain.Name, natChain.Table.Name)
	}
}
