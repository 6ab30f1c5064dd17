package netcfg

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestResetManagementDHCP(t *testing.T) {
	tests := []struct {
		name    string
		cfg     *Config
		iface   string
		wantErr string // field error value; "" for success
	}{
		{"static to dhcp on the same NIC", testConfig(), "eth0", ""},
		{"another NIC", testConfig(), "eth2", ""},
		{"no configuration yet", nil, "eth0", ""},
		{"tagged management", func() *Config { c := testConfig(); c.Management.VLAN = 20; c.Management.MTU = 9000; return c }(), "eth0", ""},
		{"a port of a bridge of the file", testConfig(), "eth1", "eth1"},
		{"no such NIC", testConfig(), "eth9", "eth9"},
		{"not a link name", testConfig(), "eth0:1", "eth0:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before *Config
			if tc.cfg != nil {
				before = tc.cfg.Clone()
			}
			got, err := ResetManagementDHCP(tc.cfg, tc.iface, testLive())
			if tc.wantErr != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != "management.interface" || fe.Value != tc.wantErr || !errors.Is(err, ErrInvalid) {
					t.Fatalf("ResetManagementDHCP = %v, %v; want a field error on management.interface %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := &Management{Interface: tc.iface, DHCP: true}
			if !reflect.DeepEqual(got.Management, want) {
				t.Errorf("management = %+v; want %+v", got.Management, want)
			}
			if tc.cfg != nil {
				if !reflect.DeepEqual(tc.cfg, before) {
					t.Errorf("the argument changed: %+v", tc.cfg)
				}
				if !reflect.DeepEqual(got.Bridges, tc.cfg.Bridges) || !reflect.DeepEqual(got.Networks, tc.cfg.Networks) ||
					!reflect.DeepEqual(got.DNS, tc.cfg.DNS) || got.Hostname != tc.cfg.Hostname {
					t.Errorf("bridges, networks, DNS or host name changed: %+v", got)
				}
			}
			if err := Validate(got, testLive(), ValidateOptions{AllowDefaultRouteChange: true}); err != nil {
				t.Errorf("the reset configuration does not validate: %v", err)
			}
		})
	}
}

func TestAddDeleteBridge(t *testing.T) {
	c := testConfig()
	got, err := AddBridge(c, Bridge{Name: "br9", Ports: []string{"eth2"}})
	if err != nil || len(got.Bridges) != 2 || got.Bridges[1].Name != "br9" || len(c.Bridges) != 1 {
		t.Errorf("AddBridge = %+v, %v; want br9 appended to a copy", got, err)
	}
	if _, err := AddBridge(c, Bridge{Name: "br0"}); !errors.Is(err, ErrBridgeExists) {
		t.Errorf("AddBridge(existing) = %v; want ErrBridgeExists", err)
	}
	var inUse *BridgeInUseError
	if _, err := DeleteBridge(c, "br0"); !errors.As(err, &inUse) || inUse.Network != "lan" {
		t.Errorf("DeleteBridge(used by lan) = %v; want a BridgeInUseError naming lan", err)
	}
	if _, err := DeleteBridge(c, "nope"); !errors.Is(err, ErrNoSuchBridge) {
		t.Errorf("DeleteBridge(nope) = %v; want ErrNoSuchBridge", err)
	}
	c.Networks = c.Networks[1:]
	got, err = DeleteBridge(c, "br0")
	if err != nil || len(got.Bridges) != 0 || len(c.Bridges) != 1 {
		t.Errorf("DeleteBridge = %+v, %v; want br0 removed from a copy", got, err)
	}
}

func TestNICs(t *testing.T) {
	if got, want := testLive().NICs(), []string{"eth0", "eth1", "eth2"}; !slices.Equal(got, want) {
		t.Errorf("NICs = %v; want %v", got, want)
	}
	if (*State)(nil).NICs() != nil {
		t.Error("NICs of nil state")
	}
}

func TestDiffConfigs(t *testing.T) {
	old := testConfig()
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string
	}{
		{"equal", func(c *Config) {}, nil},
		{"address changed", func(c *Config) { c.Management.Addresses = []string{"192.0.2.11/24"} }, []string{
			"- management.addresses: 192.0.2.10/24",
			"+ management.addresses: 192.0.2.11/24",
		}},
		{"to dhcp", func(c *Config) { c.Management = &Management{Interface: "eth0", DHCP: true} }, []string{
			"- management.addresses: 192.0.2.10/24",
			"- management.gateway: 192.0.2.1",
			"+ management.dhcp: true",
		}},
		{"bridge added", func(c *Config) { c.Bridges = append(c.Bridges, Bridge{Name: "br1", STP: true}) }, []string{
			"+ bridges[br1].name: br1",
			"+ bridges[br1].stp: true",
		}},
		{"port added", func(c *Config) { c.Bridges[0].Ports = append(c.Bridges[0].Ports, "eth2") }, []string{
			"+ bridges[br0].ports: eth2",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := old.Clone()
			tc.mutate(n)
			if got := DiffConfigs(old, n); !slices.Equal(got, tc.want) {
				t.Errorf("DiffConfigs:\ngot  %q\nwant %q", got, tc.want)
			}
		})
	}
	if got := DiffConfigs(nil, &Config{APIVersion: APIVersion, Kind: Kind, Hostname: "h"}); !slices.Equal(got, []string{
		"+ apiVersion: virtcon/v1", "+ kind: HostNetwork", "+ hostname: h"}) {
		t.Errorf("DiffConfigs(nil, …) = %q", got)
	}
}

func TestDiffLines(t *testing.T) {
	got := diffLines([]string{"a", "b", "c", "d"}, []string{"a", "x", "c", "d", "e"})
	want := []string{"- b", "+ x", "+ e"}
	if !slices.Equal(got, want) {
		t.Errorf("diffLines = %q; want %q", got, want)
	}
}
