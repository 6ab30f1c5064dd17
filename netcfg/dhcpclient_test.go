package netcfg

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

func TestDHCPLeaseRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "network", "dhcp-eth0.json")
	want := &DHCPLease{
		Interface: "eth0",
		Address:   netip.MustParsePrefix("10.66.0.57/24"),
		Router:    netip.MustParseAddr("10.66.0.1"),
		DNS:       []netip.Addr{netip.MustParseAddr("10.66.0.1"), netip.MustParseAddr("192.0.2.53")},
		Server:    netip.MustParseAddr("10.66.0.1"),
		LeaseTime: 120,
		Obtained:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if err := dhcpWriteLease(path, want); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("lease file mode: got %v; want 0600", got)
	}
	got, err := dhcpReadLease(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: got %+v; want %+v", got, want)
	}
	if exp := got.Expiry(); !exp.Equal(want.Obtained.Add(2 * time.Minute)) {
		t.Errorf("expiry: got %v; want obtained + 2m", exp)
	}

	// No router, no DNS: the fields are left out, and read back as zero.
	bare := &DHCPLease{Interface: "eth0", Address: netip.MustParsePrefix("192.0.2.9/32"), LeaseTime: 60, Obtained: want.Obtained}
	if err := dhcpWriteLease(path, bare); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "router") || strings.Contains(string(b), "dns") {
		t.Errorf("lease file without router/dns: got %s; want neither field", b)
	}
	got, err = dhcpReadLease(path)
	if err != nil || !reflect.DeepEqual(got, bare) {
		t.Errorf("bare round trip: got %+v, %v; want %+v", got, err, bare)
	}

	if got, err := dhcpReadLease(filepath.Join(t.TempDir(), "none.json")); got != nil || err != nil {
		t.Errorf("missing lease file: got %v, %v; want nil, nil", got, err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dhcpReadLease(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("damaged lease file: got %v; want an error naming %s", err, path)
	}
}

func TestDHCPParseEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    dhcpEnv
		ok      bool
		wantErr string
	}{
		{name: "not a client", env: map[string]string{}, ok: false},
		{
			name: "client",
			env:  map[string]string{DHCPClientEnv: "eth0", dhcpLeaseEnv: "/var/lib/virtcon/network/dhcp-eth0.json", dhcpPIDEnv: "/run/virtcon/network/dhcp-eth0.pid"},
			want: dhcpEnv{iface: "eth0", lease: "/var/lib/virtcon/network/dhcp-eth0.json", pid: "/run/virtcon/network/dhcp-eth0.pid"},
			ok:   true,
		},
		{
			name: "no pidfile",
			env:  map[string]string{DHCPClientEnv: "eth0", dhcpLeaseEnv: "/l.json"},
			want: dhcpEnv{iface: "eth0", lease: "/l.json"},
			ok:   true,
		},
		{name: "bad interface", env: map[string]string{DHCPClientEnv: "../x", dhcpLeaseEnv: "/l.json"}, ok: true, wantErr: "link name"},
		{name: "empty interface", env: map[string]string{DHCPClientEnv: "", dhcpLeaseEnv: "/l.json"}, ok: true, wantErr: "link name"},
		{name: "no lease path", env: map[string]string{DHCPClientEnv: "eth0"}, ok: true, wantErr: dhcpLeaseEnv},
		{name: "relative lease path", env: map[string]string{DHCPClientEnv: "eth0", dhcpLeaseEnv: "l.json"}, ok: true, wantErr: dhcpLeaseEnv},
		{name: "relative pidfile", env: map[string]string{DHCPClientEnv: "eth0", dhcpLeaseEnv: "/l.json", dhcpPIDEnv: "p"}, ok: true, wantErr: dhcpPIDEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, ok, err := dhcpParseEnv(lookup)
			if ok != tt.ok {
				t.Fatalf("ok: got %v; want %v", ok, tt.ok)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err: got %v; want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err: got %v; want nil", err)
			}
			if got != tt.want {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestDHCPEnvironRoundTrip(t *testing.T) {
	t.Setenv(DHCPClientEnv, "stale0")
	f := dhcpFilesFor(paths.Layout{Root: "/srv/x"}, "eth1")
	env := map[string]string{}
	n := 0
	for _, kv := range dhcpEnviron(f, "eth1") {
		k, v, _ := strings.Cut(kv, "=")
		if k == DHCPClientEnv {
			n++
		}
		env[k] = v
	}
	if n != 1 {
		t.Errorf("%s appears %d times; want once", DHCPClientEnv, n)
	}
	got, ok, err := dhcpParseEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	want := dhcpEnv{iface: "eth1", lease: f.lease, pid: f.pid}
	if !ok || err != nil || got != want {
		t.Errorf("got %+v, %v, %v; want %+v, true, nil", got, ok, err, want)
	}
	if !strings.HasPrefix(f.lease, "/srv/x/") || filepath.Base(f.lease) != "dhcp-eth1.json" {
		t.Errorf("lease path: got %s; want /srv/x/.../dhcp-eth1.json", f.lease)
	}
}

func TestDHCPPrefixLen(t *testing.T) {
	tests := []struct {
		ip      string
		mask    net.IPMask
		want    int
		wantErr bool
	}{
		{"10.66.0.57", net.IPv4Mask(255, 255, 255, 0), 24, false},
		{"10.66.0.57", net.IPv4Mask(255, 255, 255, 255), 32, false},
		{"10.66.0.57", net.IPv4Mask(255, 255, 240, 0), 20, false},
		{"10.66.0.57", net.IPv4Mask(0, 0, 0, 0), 0, false},
		{"10.66.0.57", net.IPv4Mask(255, 0, 255, 0), 0, true}, // not contiguous
		{"10.66.0.57", net.IPMask{255, 255}, 0, true},         // wrong length
		{"10.66.0.57", nil, 8, false},                         // class A default
		{"172.16.3.4", nil, 16, false},                        // class B default
		{"192.0.2.7", nil, 24, false},                         // class C default
		{"2001:db8::1", nil, 0, true},
	}
	for _, tt := range tests {
		got, err := dhcpPrefixLen(net.ParseIP(tt.ip), tt.mask)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("dhcpPrefixLen(%s, %v): got %d, %v; want %d, error %v", tt.ip, tt.mask, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDHCPRunningRejectsStrangers(t *testing.T) {
	layout := paths.Layout{Root: t.TempDir()}
	f := dhcpFilesFor(layout, "eth0")
	if err := os.MkdirAll(filepath.Dir(f.pid), 0o700); err != nil {
		t.Fatal(err)
	}
	// This test process is alive but is no DHCP client: PID reuse must not
	// fool the check.
	if err := os.WriteFile(f.pid, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, ok := dhcpRunning(f, "eth0"); ok {
		t.Errorf("dhcpRunning: got pid %d alive; want not ours", pid)
	}
	if stopped, err := stopDHCPClient(layout, "eth0"); stopped || err != nil {
		t.Errorf("stopDHCPClient: got %v, %v; want false, nil", stopped, err)
	}
	if _, err := os.Stat(f.pid); !os.IsNotExist(err) {
		t.Errorf("stale pidfile: got %v; want removed", err)
	}
	if got := dhcpPlan(layout, &Config{Management: &Management{Interface: "eth0", DHCP: true}}, nil); !reflect.DeepEqual(got, []string{"start DHCP client on eth0"}) {
		t.Errorf("dhcpPlan: got %q; want the start step", got)
	}
}
