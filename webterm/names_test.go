package webterm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeHostTree makes a captured host root with the files given (path
// relative to the root → content).
func writeHostTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		path := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// checkAddrs checks what LocalNames says of any host's addresses.
func checkAddrs(t *testing.T, addrs []netip.Addr) {
	t.Helper()
	for _, want := range []string{"127.0.0.1", "::1"} {
		if !slices.Contains(addrs, netip.MustParseAddr(want)) {
			t.Errorf("addresses %v lack %s", addrs, want)
		}
	}
	if !slices.IsSortedFunc(addrs, netip.Addr.Compare) {
		t.Errorf("addresses %v not sorted", addrs)
	}
	if len(slices.Compact(slices.Clone(addrs))) != len(addrs) {
		t.Errorf("addresses %v have duplicates", addrs)
	}
	for _, a := range addrs {
		switch {
		case a.IsLinkLocalUnicast():
			t.Errorf("link-local %s among %v", a, addrs)
		case a.IsLoopback() && a != netip.MustParseAddr("127.0.0.1") && a != netip.IPv6Loopback():
			t.Errorf("loopback %s among %v", a, addrs)
		case a.Zone() != "" || a.Is4In6():
			t.Errorf("%s: zoned or IPv4-mapped", a)
		}
	}
}

func TestLocalNamesHostTree(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    []string
		wantErr string
	}{
		{
			name: "short host name, full name in hosts",
			files: map[string]string{
				"etc/hostname": "Web1\n",
				"etc/hosts":    "127.0.0.1 localhost\n# 127.0.1.1 web1.wrong.example web1\n127.0.1.1\tWeb1.Example.COM web1 # the host\n::1 localhost ip6-localhost\n",
			},
			want: []string{"localhost", "web1", "web1.example.com"},
		},
		{
			name:  "full host name",
			files: map[string]string{"etc/hostname": "web1.example.com\n", "etc/hosts": "127.0.1.1 web1.example.com web1\n"},
			want:  []string{"localhost", "web1.example.com"},
		},
		{
			name:  "no hosts file",
			files: map[string]string{"etc/hostname": "web1"},
			want:  []string{"localhost", "web1"},
		},
		{
			name:  "hosts names other hosts only",
			files: map[string]string{"etc/hostname": "web1", "etc/hosts": "192.0.2.5 web10.example.com web10\n192.0.2.6 db.example.com web1x\n"},
			want:  []string{"localhost", "web1"},
		},
		{
			name:  "comment and blank lines before the name",
			files: map[string]string{"etc/hostname": "# set by the installer\n\n  web1  \n"},
			want:  []string{"localhost", "web1"},
		},
		{
			name:  "host named localhost",
			files: map[string]string{"etc/hostname": "localhost\n"},
			want:  []string{"localhost"},
		},
		{name: "no hostname file", files: map[string]string{"etc/hosts": ""}, wantErr: "hostname"},
		{name: "empty hostname file", files: map[string]string{"etc/hostname": "\n"}, wantErr: "empty"},
		{name: "host name that is not a DNS name", files: map[string]string{"etc/hostname": "web 1\n"}, wantErr: `"web 1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeHostTree(t, tt.files)
			names, addrs, err := LocalNames(root)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LocalNames error = %v; want one saying %q", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), filepath.Join(root, "etc", "hostname")) {
					t.Errorf("error %q does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("names = %v; want %v", names, tt.want)
			}
			checkAddrs(t, addrs)
		})
	}
}

// TestLocalNamesHostTreeNoDNS: a captured tree's host is not this
// host, so its name is never asked of this host's resolver.
func TestLocalNamesHostTreeNoDNS(t *testing.T) {
	saved := fqdnLookup
	defer func() { fqdnLookup = saved }()
	fqdnLookup = func(context.Context, string) (string, error) {
		t.Error("the resolver was asked about a captured tree's host")
		return "web1.example.com.", nil
	}
	root := writeHostTree(t, map[string]string{"etc/hostname": "web1\n"})
	names, _, err := LocalNames(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"localhost", "web1"}; !slices.Equal(names, want) {
		t.Errorf("names = %v; want %v", names, want)
	}
}

func TestLocalNamesLive(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	names, addrs, err := LocalNames("/")
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("LocalNames took %v; want at most about a second", took)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"localhost", strings.ToLower(host)} {
		if !slices.Contains(names, want) {
			t.Errorf("names %v lack %q", names, want)
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("names %v: not sorted or with duplicates", names)
	}
	checkAddrs(t, addrs)

	// every other address is one of an interface that is up
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var up []netip.Addr
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		as, _ := ifc.Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				up = append(up, p.Addr().Unmap())
			}
		}
	}
	for _, a := range addrs {
		if !a.IsLoopback() && !slices.Contains(up, a) {
			t.Errorf("address %s is on no interface that is up (%v)", a, up)
		}
	}
	if _, _, err := LocalNames(""); err != nil {
		t.Errorf(`LocalNames(""): %v; want it to be this host, like "/"`, err)
	}
}

func TestNamesDNSFQDN(t *testing.T) {
	saved := fqdnLookup
	defer func() { fqdnLookup = saved }()
	tests := []struct {
		name   string
		host   string
		answer string
		err    error
		hang   bool
		want   string
	}{
		{name: "search domain", host: "web1", answer: "web1.example.com.", want: "web1.example.com"},
		{name: "upper case", host: "web1", answer: "WEB1.Example.com.", want: "web1.example.com"},
		{name: "the host itself (from /etc/hosts)", host: "web1", answer: "web1", want: ""},
		{name: "an alias of another host", host: "web1", answer: "lb.example.net.", want: ""},
		{name: "a longer name that starts the same", host: "web1", answer: "web10.example.com.", want: ""},
		{name: "no answer", host: "web1", err: errors.New("no such host"), want: ""},
		{name: "already full", host: "web1.example.com", answer: "web1.example.com.example.com.", want: ""},
		{name: "resolver that does not answer", host: "web1", hang: true, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fqdnLookup = func(ctx context.Context, name string) (string, error) {
				if name != tt.host {
					t.Errorf("asked about %q; want %q", name, tt.host)
				}
				if tt.hang {
					<-ctx.Done()
					return "", ctx.Err()
				}
				return tt.answer, tt.err
			}
			start := time.Now()
			got := dnsFQDN(tt.host)
			if took := time.Since(start); took > 1500*time.Millisecond {
				t.Errorf("dnsFQDN took %v; want at most about a second", took)
			}
			if got != tt.want {
				t.Errorf("dnsFQDN(%q) = %q; want %q", tt.host, got, tt.want)
			}
		})
	}
}

func TestNamesUsableAddrs(t *testing.T) {
	ipnet := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	up := net.FlagUp | net.FlagBroadcast | net.FlagRunning
	tests := []struct {
		name string
		list []ifaceAddrs
		want []string
	}{
		{"none", nil, []string{"127.0.0.1", "::1"}},
		{"v4 and v6, link-local dropped", []ifaceAddrs{{up, []net.Addr{
			ipnet("192.0.2.2/24"), ipnet("fd00::2/64"), ipnet("fe80::fc:ff:fe00:1/64"), ipnet("169.254.7.7/16"),
		}}}, []string{"127.0.0.1", "192.0.2.2", "::1", "fd00::2"}},
		{"down interface", []ifaceAddrs{{net.FlagBroadcast, []net.Addr{ipnet("192.0.2.3/24")}}}, []string{"127.0.0.1", "::1"}},
		{"loopback interface", []ifaceAddrs{{net.FlagUp | net.FlagLoopback, []net.Addr{ipnet("127.0.1.1/8"), ipnet("::1/128")}}}, []string{"127.0.0.1", "::1"}},
		{"loopback address elsewhere", []ifaceAddrs{{up, []net.Addr{ipnet("127.0.0.53/8")}}}, []string{"127.0.0.1", "::1"}},
		{"mapped, zoned, duplicated, unordered", []ifaceAddrs{
			{up, []net.Addr{&net.IPAddr{IP: net.ParseIP("2001:db8::1"), Zone: "eth0"}, ipnet("::ffff:198.51.100.1/120")}},
			{up, []net.Addr{ipnet("10.0.0.1/8"), ipnet("198.51.100.1/24")}},
		}, []string{"10.0.0.1", "127.0.0.1", "198.51.100.1", "::1", "2001:db8::1"}},
		{"multicast, unspecified, not an IP", []ifaceAddrs{{up, []net.Addr{
			&net.IPAddr{IP: net.ParseIP("ff02::1")}, &net.IPAddr{IP: net.IPv4zero}, &net.UnixAddr{Name: "/x", Net: "unix"},
		}}}, []string{"127.0.0.1", "::1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range usableAddrs(tt.list) {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("usableAddrs = %v; want %v", got, tt.want)
			}
		})
	}
}
