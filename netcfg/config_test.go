package netcfg

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/paths"
)

func TestDecodeExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "network.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode(testdata/network.yaml) = %v", err)
	}
	if got, want := len(cfg.Bridges), 2; got != want {
		t.Errorf("bridges: got %d; want %d", got, want)
	}
	if got, want := cfg.DNS.Servers, []string{"192.0.2.53", "2001:db8::53"}; !slices.Equal(got, want) {
		t.Errorf("dns.servers: got %q; want %q", got, want)
	}
	if cfg.Management == nil || cfg.Management.Gateway != "192.0.2.1" {
		t.Errorf("management: got %+v; want gateway 192.0.2.1", cfg.Management)
	}
	// The example refers to host NICs, so check it on its own only.
	if err := Validate(cfg, nil, ValidateOptions{}); err != nil {
		t.Errorf("Validate(example, no live state) = %v", err)
	}
}

func TestDecodeJSON(t *testing.T) {
	in := "{\n\t\"apiVersion\": \"virtcon/v1\",\n\t\"kind\": \"HostNetwork\",\n\t\"bridges\": [{\"name\": \"br0\", \"stp\": true, \"mtu\": 9000}]\n}\n"
	cfg, err := Decode([]byte(in))
	if err != nil {
		t.Fatalf("Decode(JSON) = %v", err)
	}
	if len(cfg.Bridges) != 1 || !cfg.Bridges[0].STP || cfg.Bridges[0].MTU != 9000 {
		t.Errorf("got %+v; want br0 stp mtu 9000", cfg.Bridges)
	}
}

func TestDecodeTrailingSeparator(t *testing.T) {
	if _, err := Decode([]byte("apiVersion: virtcon/v1\nkind: HostNetwork\n---\n")); err != nil {
		t.Errorf("Decode with trailing --- = %v; want nil", err)
	}
}

func TestDecodeBad(t *testing.T) {
	const head = "apiVersion: virtcon/v1\nkind: HostNetwork\n"
	tests := []struct {
		name, in string
		want     []string // substrings of the message: field path, value
	}{
		{"empty", "", []string{"empty"}},
		{"only comments", "# nothing\n", []string{"empty"}},
		{"two documents", head + "---\n" + head, []string{"more than one document"}},
		{"syntax", head + "bridges: [\n", []string{"line"}},
		{"unknown top-level field", head + "bridge:\n  - name: br0\n", []string{"bridge: unknown field"}},
		{"unknown nested field", head + "bridges:\n  - name: br0\n    vlanfiltering: true\n", []string{"bridges[0].vlanfiltering: unknown field", `did you mean "vlanFiltering"`}},
		{"unknown management field", head + "management:\n  iface: eth0\n", []string{"management.iface: unknown field"}},
		{"unknown field in JSON", `{"apiVersion":"virtcon/v1","kind":"HostNetwork","vlans":[{"name":"v","link":"eth0","id":5,"tag":1}]}`, []string{"vlans[0].tag: unknown field"}},
		{"wrong type int", head + "bridges:\n  - name: br0\n    mtu: big\n", []string{"bridges[0].mtu: must be an integer", `"big"`}},
		{"wrong type bool", head + "bridges:\n  - name: br0\n    stp: yes please\n", []string{"bridges[0].stp: must be true or false", `"yes please"`}},
		{"wrong type list", head + "bridges:\n  name: br0\n", []string{"bridges: must be a list"}},
		{"not a mapping", "- a\n- b\n", []string{"(document): must be a mapping"}},
		{"wrong apiVersion", "apiVersion: virtcon/v2\nkind: HostNetwork\n", []string{"apiVersion: want virtcon/v1", `"virtcon/v2"`}},
		{"wrong kind", "apiVersion: virtcon/v1\nkind: VirtualMachine\n", []string{"kind: want HostNetwork", `"VirtualMachine"`}},
		{"missing apiVersion", "kind: HostNetwork\n", []string{"apiVersion: want virtcon/v1", `""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatal("Decode succeeded; want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

// testLive is a host with a management NIC carrying the default route,
// two spare NICs and a bridge virtcon did not make.
func testLive() *State {
	return &State{
		Links: []Link{
			{Name: "lo", Type: "device", Index: 1, MTU: 65536, Up: true, Addresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
			{Name: "eth0", Type: "device", Index: 2, MTU: 1500, Up: true, Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}},
			{Name: "eth1", Type: "device", Index: 3, MTU: 1500, Up: true},
			{Name: "eth2", Type: "device", Index: 4, MTU: 9000, Up: true},
			{Name: "hostbr", Type: "bridge", Index: 5, MTU: 1500, Up: true, Addresses: []netip.Prefix{netip.MustParsePrefix("172.16.0.1/24")}},
		},
		Routes: []Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.0.2.1"), Link: "eth0", Protocol: 4},
			{Dst: netip.MustParsePrefix("192.0.2.0/24"), Link: "eth0", Protocol: 2, Scope: 253, Src: netip.MustParseAddr("192.0.2.10")},
		},
	}
}

// testConfig is valid against testLive.
func testConfig() *Config {
	return &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Hostname:   "hv-01",
		DNS:        DNS{Servers: []string{"192.0.2.53"}, Search: []string{"lab.example"}},
		Management: &Management{Interface: "eth0", Addresses: []string{"192.0.2.10/24"}, Gateway: "192.0.2.1"},
		Bridges:    []Bridge{{Name: "br0", Ports: []string{"eth1"}, Addresses: []string{"10.0.0.1/24"}}},
		VLANs:      []VLAN{{Name: "eth2.10", Link: "eth2", ID: 10, Addresses: []string{"10.1.0.1/24"}}},
		Networks: []Network{
			{Name: "lan", Type: "bridged", Bridge: "br0"},
			{Name: "default", Type: "nat", Bridge: "virbr0", Subnet: "10.100.0.0/24"},
		},
	}
}

func TestValidateGood(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		opts   ValidateOptions
	}{
		{"base", func(c *Config) {}, ValidateOptions{}},
		{"port is a VLAN of this file", func(c *Config) { c.Bridges[0].Ports = append(c.Bridges[0].Ports, "eth2.10") }, ValidateOptions{}},
		{"VLAN on a bridge of this file", func(c *Config) { c.VLANs = append(c.VLANs, VLAN{Name: "br0.7", Link: "br0", ID: 7}) }, ValidateOptions{}},
		{"bridged network on a host bridge", func(c *Config) { c.Networks[0].Bridge = "hostbr" }, ValidateOptions{}},
		{"two addresses of one subnet on one link", func(c *Config) { c.Bridges[0].Addresses = append(c.Bridges[0].Addresses, "10.0.0.2/24") }, ValidateOptions{}},
		{"IPv6", func(c *Config) { c.Bridges[0].Addresses = append(c.Bridges[0].Addresses, "2001:db8::1/64") }, ValidateOptions{}},
		{"default route uplink with --try", func(c *Config) {
			c.Bridges[0].Ports = []string{"eth0"}
			c.Management.Interface = "br0"
			c.Bridges[0].Addresses = nil
		}, ValidateOptions{AllowDefaultRouteChange: true}},
		{"gateway reached through the moved uplink address", func(c *Config) {
			c.Bridges[0].Ports = []string{"eth0"}
			c.Bridges[0].Addresses = nil
			c.Management = &Management{Interface: "br0", Gateway: "192.0.2.1"}
		}, ValidateOptions{AllowDefaultRouteChange: true}},
		{"management VLAN made by virtcon", func(c *Config) {
			c.Management = &Management{Interface: "eth2", VLAN: 30, Addresses: []string{"203.0.113.5/24"}}
		}, ValidateOptions{}},
		{"dhcp", func(c *Config) { c.Management = &Management{Interface: "eth0", DHCP: true} }, ValidateOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.mutate(c)
			if err := Validate(c, testLive(), tt.opts); err != nil {
				t.Errorf("Validate = %v; want nil", err)
			}
		})
	}
}

func TestValidateBad(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		field  string
		value  string // as quoted in the message
		msg    string
	}{
		{"name over 15 bytes", func(c *Config) { c.Bridges[0].Name = "br-0123456789abc" }, "bridges[0].name", `"br-0123456789abc"`, "16 bytes"},
		{"name with slash", func(c *Config) { c.Bridges[0].Name = "br/0" }, "bridges[0].name", `"br/0"`, "interface names are"},
		{"name with colon", func(c *Config) { c.VLANs[0].Name = "eth2:10" }, "vlans[0].name", `"eth2:10"`, "interface names are"},
		{"empty name", func(c *Config) { c.Bridges[0].Name = "" }, "bridges[0].name", `""`, "required"},
		{"VLAN name over 15 bytes", func(c *Config) { c.VLANs[0].Name = "eth2.verylong10" + "x" }, "vlans[0].name", `"eth2.verylong10x"`, "16 bytes"},
		{"port name invalid", func(c *Config) { c.Bridges[0].Ports = []string{"eth 1"} }, "bridges[0].ports[0]", `"eth 1"`, "interface names are"},
		{"duplicate bridge/VLAN name", func(c *Config) { c.VLANs[0].Name = "br0" }, "vlans[0].name", `"br0"`, "duplicate interface name (also bridges[0].name)"},
		{"duplicate bridge names", func(c *Config) { c.Bridges = append(c.Bridges, Bridge{Name: "br0"}) }, "bridges[1].name", `"br0"`, "duplicate interface name"},
		{"nat bridge duplicates a bridge", func(c *Config) { c.Networks[1].Bridge = "br0" }, "networks[1].bridge", `"br0"`, "duplicate interface name"},
		{"duplicate network name", func(c *Config) { c.Networks[1].Name = "lan" }, "networks[1].name", `"lan"`, "duplicate network name"},
		{"VLAN id 0", func(c *Config) { c.VLANs[0].ID = 0 }, "vlans[0].id", "0", "1-4094"},
		{"VLAN id 4095", func(c *Config) { c.VLANs[0].ID = 4095 }, "vlans[0].id", "4095", "1-4094"},
		{"duplicate VLAN id on a link", func(c *Config) { c.VLANs = append(c.VLANs, VLAN{Name: "v10", Link: "eth2", ID: 10}) }, "vlans[1].id", "10", "already has VLAN 10"},
		{"management VLAN out of range", func(c *Config) { c.Management.VLAN = 5000 }, "management.vlan", "5000", "1-4094"},
		{"address without prefix", func(c *Config) { c.Bridges[0].Addresses = []string{"10.0.0.1"} }, "bridges[0].addresses[0]", `"10.0.0.1"`, "prefix length"},
		{"address not an IP", func(c *Config) { c.VLANs[0].Addresses = []string{"10.1.0.300/24"} }, "vlans[0].addresses[0]", `"10.1.0.300/24"`, "prefix length"},
		{"network address as host address", func(c *Config) { c.Bridges[0].Addresses = []string{"10.0.0.0/24"} }, "bridges[0].addresses[0]", `"10.0.0.0/24"`, "network address"},
		{"management address invalid", func(c *Config) { c.Management.Addresses = []string{"192.0.2.10/33"} }, "management.addresses[0]", `"192.0.2.10/33"`, "prefix length"},
		{"gateway not an IP", func(c *Config) { c.Management.Gateway = "192.0.2.300" }, "management.gateway", `"192.0.2.300"`, "IPv4 or IPv6 address"},
		{"gateway off-subnet", func(c *Config) { c.Management.Gateway = "203.0.113.1" }, "management.gateway", `"203.0.113.1"`, "none of the subnets"},
		{"overlapping addresses on two links", func(c *Config) { c.VLANs[0].Addresses = []string{"10.0.5.1/16"} }, "vlans[0].addresses[0]", `"10.0.5.1/16"`, "overlaps bridges[0].addresses[0]"},
		{"same address twice", func(c *Config) { c.VLANs[0].Addresses = []string{"10.0.0.1/24"} }, "vlans[0].addresses[0]", `"10.0.0.1/24"`, "same address"},
		{"nat subnet overlaps an address", func(c *Config) { c.Networks[1].Subnet = "10.0.0.0/16" }, "networks[1].subnet", `"10.0.0.0/16"`, "overlaps bridges[0].addresses[0]"},
		{"nat subnets overlap", func(c *Config) {
			c.Networks = append(c.Networks, Network{Name: "n2", Type: "nat", Bridge: "virbr1", Subnet: "10.100.0.128/25"})
		}, "networks[2].subnet", `"10.100.0.128/25"`, "overlaps networks[1].subnet"},
		{"nat subnet overlaps the host's LAN", func(c *Config) { c.Networks[1].Subnet = "172.16.0.0/16" }, "networks[1].subnet", `"172.16.0.0/16"`, `the host's interface "hostbr"`},
		{"nat subnet not a network address", func(c *Config) { c.Networks[1].Subnet = "10.100.0.1/24" }, "networks[1].subnet", `"10.100.0.1/24"`, "network address"},
		{"nat subnet IPv6", func(c *Config) { c.Networks[1].Subnet = "fd00::/64" }, "networks[1].subnet", `"fd00::/64"`, "IPv4"},
		{"nat without subnet", func(c *Config) { c.Networks[1].Subnet = "" }, "networks[1].subnet", `""`, "required for a nat network"},
		{"unknown network type", func(c *Config) { c.Networks[0].Type = "routed" }, "networks[0].type", `"routed"`, "unknown network type"},
		{"missing network type", func(c *Config) { c.Networks[0].Type = "" }, "networks[0].type", `""`, "required"},
		{"bridged network on an unknown bridge", func(c *Config) { c.Networks[0].Bridge = "br9" }, "networks[0].bridge", `"br9"`, "unknown bridge"},
		{"bridged network on a VLAN", func(c *Config) { c.Networks[0].Bridge = "eth2.10" }, "networks[0].bridge", `"eth2.10"`, "not a bridge"},
		{"bridged network with subnet", func(c *Config) { c.Networks[0].Subnet = "10.9.0.0/24" }, "networks[0].subnet", `"10.9.0.0/24"`, "only nat networks"},
		{"port of two bridges", func(c *Config) { c.Bridges = append(c.Bridges, Bridge{Name: "br1", Ports: []string{"eth1"}}) }, "bridges[1].ports[0]", `"eth1"`, `already a port of bridge "br0"`},
		{"port twice in a bridge", func(c *Config) { c.Bridges[0].Ports = []string{"eth1", "eth1"} }, "bridges[0].ports[1]", `"eth1"`, "listed twice"},
		{"port missing on host", func(c *Config) { c.Bridges[0].Ports = []string{"eth9"} }, "bridges[0].ports[0]", `"eth9"`, "no such interface on the host, and not a VLAN"},
		{"port is loopback", func(c *Config) { c.Bridges[0].Ports = []string{"lo"} }, "bridges[0].ports[0]", `"lo"`, "loopback"},
		{"port is a bridge", func(c *Config) { c.Bridges[0].Ports = []string{"hostbr"} }, "bridges[0].ports[0]", `"hostbr"`, "is a bridge"},
		{"VLAN parent missing", func(c *Config) { c.VLANs[0].Link = "eth7" }, "vlans[0].link", `"eth7"`, "no such interface"},
		{"bridge name taken by a NIC", func(c *Config) { c.Bridges[0].Name = "eth2"; c.VLANs = nil; c.Networks = c.Networks[1:] }, "bridges[0].name", `"eth2"`, "exists on the host as a device link"},
		{"bridge MTU too small", func(c *Config) { c.Bridges[0].MTU = 67 }, "bridges[0].mtu", "67", "68-65535"},
		{"VLAN MTU too big", func(c *Config) { c.VLANs[0].MTU = 65536 }, "vlans[0].mtu", "65536", "68-65535"},
		{"VLAN MTU above parent", func(c *Config) { c.VLANs[0].Link = "eth1"; c.VLANs[0].MTU = 9000 }, "vlans[0].mtu", "9000", `above the MTU of its link "eth1" (1500)`},
		{"management MTU", func(c *Config) { c.Management.MTU = 10 }, "management.mtu", "10", "68-65535"},
		{"management interface missing", func(c *Config) { c.Management.Interface = "" }, "management.interface", `""`, "required"},
		{"management interface is a port", func(c *Config) {
			c.Management.Interface = "eth1"
			c.Management.Addresses = nil
			c.Management.Gateway = ""
		}, "management.interface", `"eth1"`, "is a port of bridge"},
		{"dhcp with static", func(c *Config) { c.Management.DHCP = true }, "management.dhcp", "true", "exclude each other"},
		{"default route uplink without --try", func(c *Config) {
			c.Bridges[0].Ports = []string{"eth0"}
			c.Management.Interface = "br0"
			c.Bridges[0].Addresses = nil
		}, "bridges[0].ports[0]", `"eth0"`, "carries the host's default route"},
		{"dns server", func(c *Config) { c.DNS.Servers = []string{"dns.example"} }, "dns.servers[0]", `"dns.example"`, "address"},
		{"hostname", func(c *Config) { c.Hostname = "-bad-" }, "hostname", `"-bad-"`, "host name"},
		{"apiVersion", func(c *Config) { c.APIVersion = "v1" }, "apiVersion", `"v1"`, "want virtcon/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.mutate(c)
			err := Validate(c, testLive(), ValidateOptions{})
			if err == nil {
				t.Fatal("Validate = nil; want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T; want *ValidationError", err)
			}
			for _, fe := range ve.Errs {
				if fe.Field == tt.field {
					if msg := fe.Error(); !strings.Contains(msg, tt.value) || !strings.Contains(msg, tt.msg) {
						t.Errorf("%s: got %q; want the value %s and %q", tt.field, msg, tt.value, tt.msg)
					}
					return
				}
			}
			t.Errorf("got %v; want an error on field %s", err, tt.field)
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := testConfig()
	c.Bridges[0].Name = "br-0123456789abc"
	c.VLANs[0].ID = 0
	c.Networks[1].Subnet = ""
	c.Bridges[0].MTU = 1
	err := Validate(c, testLive(), ValidateOptions{})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v; want *ValidationError", err)
	}
	var fields []string
	for _, fe := range ve.Errs {
		fields = append(fields, fe.Field)
	}
	for _, want := range []string{"bridges[0].name", "vlans[0].id", "networks[1].subnet", "bridges[0].mtu"} {
		if !slices.Contains(fields, want) {
			t.Errorf("errors on %q; want one on %s", fields, want)
		}
	}
}

func TestValidateWithoutLive(t *testing.T) {
	c := testConfig()
	c.Bridges[0].Ports = []string{"eth9"} // unknown host: not checked
	if err := Validate(c, nil, ValidateOptions{}); err != nil {
		t.Errorf("Validate(no live state) = %v; want nil", err)
	}
}

func TestAppliedRecord(t *testing.T) {
	layout := paths.New(t.TempDir())
	prev, err := LoadApplied(layout)
	if prev != nil || err != nil {
		t.Fatalf("LoadApplied(none) = %v, %v; want nil, nil", prev, err)
	}
	cfg := testConfig()
	if err := record(layout, cfg); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(AppliedFile(layout))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
	got, err := LoadApplied(layout)
	if err != nil {
		t.Fatal(err)
	}
	if got.DNS.Search[0] != "lab.example" || got.Bridges[0].Name != "br0" || got.Networks[1].Subnet != "10.100.0.0/24" {
		t.Errorf("LoadApplied = %+v; want what was recorded", got)
	}
	// A second record of the same configuration leaves the file alone.
	before := fi.ModTime()
	if err := record(layout, cfg); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(AppliedFile(layout)); !fi2.ModTime().Equal(before) {
		t.Errorf("record rewrote an identical file")
	}

	if err := os.WriteFile(AppliedFile(layout), []byte("bridges: {\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadApplied(layout)
	if err == nil || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("LoadApplied(damaged) = %v; want a 'damaged' error that is not ErrInvalid", err)
	}
}

func TestApplySystemWritesUnderRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	layout := paths.New(root)
	cfg := &Config{Hostname: "kvm01", DNS: DNS{Servers: []string{"192.0.2.53", "2001:db8::53"}, Search: []string{"example.net"}}}
	changed, err := applySystem(layout, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 2 {
		t.Errorf("changes %v; want the two files", changed)
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/resolv.conf"))
	for _, want := range []string{"search example.net\n", "nameserver 192.0.2.53\n", "nameserver 2001:db8::53\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("resolv.conf lacks %q:\n%s", want, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "kvm01\n" {
		t.Errorf("hostname file %q", b)
	}
	if changed, err := applySystem(layout, cfg); err != nil || len(changed) != 0 {
		t.Errorf("second apply changed %v (%v); want nothing", changed, err)
	}
}
