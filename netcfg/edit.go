package netcfg

import (
	"errors"
	"fmt"
	"slices"
)

// Edits the CLI's imperative commands and the DCUI's forms make to a
// configuration. Each returns a changed copy and leaves its argument
// alone, so a caller can still show the difference (DiffConfigs) or drop
// the edit. None of them validates the result: ApplyDesired does.

// Errors of the edits, for callers to branch on.
var (
	// ErrNoSuchBridge: the bridge is not in the configuration (virtcon
	// deletes only bridges it made).
	ErrNoSuchBridge = errors.New("no such bridge in the configuration")
	// ErrBridgeExists: a bridge of that name is already in it.
	ErrBridgeExists = errors.New("bridge already in the configuration")
	// ErrNetworkExists: a VM network of that name is already in it.
	ErrNetworkExists = errors.New("network already in the configuration")
	// ErrNoSuchNetwork: the configuration has no such nat network.
	ErrNoSuchNetwork = errors.New("no such nat network in the configuration")
)

// BridgeInUseError refuses to delete a bridge that a VM network uses.
type BridgeInUseError struct{ Bridge, Network string }

func (e *BridgeInUseError) Error() string {
	return fmt.Sprintf("bridge %q carries network %q: delete or change the network first", e.Bridge, e.Network)
}

// Clone returns a deep copy of c (nil for nil).
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	out := *c
	out.DNS = DNS{Servers: slices.Clone(c.DNS.Servers), Search: slices.Clone(c.DNS.Search)}
	if c.Management != nil {
		m := *c.Management
		m.Addresses = slices.Clone(m.Addresses)
		out.Management = &m
	}
	out.Bridges = slices.Clone(c.Bridges)
	for i := range out.Bridges {
		out.Bridges[i].Ports = slices.Clone(out.Bridges[i].Ports)
		out.Bridges[i].Addresses = slices.Clone(out.Bridges[i].Addresses)
	}
	out.VLANs = slices.Clone(c.VLANs)
	for i := range out.VLANs {
		out.VLANs[i].Addresses = slices.Clone(out.VLANs[i].Addresses)
	}
	out.Networks = slices.Clone(c.Networks)
	return &out
}

// AddBridge returns cfg with b appended, or an error wrapping
// ErrBridgeExists.
func AddBridge(cfg *Config, b Bridge) (*Config, error) {
	if slices.ContainsFunc(cfg.Bridges, func(x Bridge) bool { return x.Name == b.Name }) {
		return nil, fmt.Errorf("bridge %q: %w", b.Name, ErrBridgeExists)
	}
	out := cfg.Clone()
	out.Bridges = append(out.Bridges, b)
	return out, nil
}

// DeleteBridge returns cfg without the bridge name: an error wrapping
// ErrNoSuchBridge when cfg lacks it, a *BridgeInUseError when a network
// uses it.
func DeleteBridge(cfg *Config, name string) (*Config, error) {
	i := slices.IndexFunc(cfg.Bridges, func(b Bridge) bool { return b.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("bridge %q: %w", name, ErrNoSuchBridge)
	}
	for _, n := range cfg.Networks {
		if n.Bridge == name {
			return nil, &BridgeInUseError{Bridge: name, Network: n.Name}
		}
	}
	out := cfg.Clone()
	out.Bridges = slices.Delete(out.Bridges, i, i+1)
	return out, nil
}

// NATBridgeName is the bridge a nat network gets when none is named:
// vcnat-NAME, cut to the kernel's MaxLinkName bytes.
func NATBridgeName(network string) string {
	b := "vcnat-" + network
	if len(b) > MaxLinkName {
		b = b[:MaxLinkName]
	}
	return b
}

// AddNATNetwork returns cfg with a nat network name on subnet appended,
// its bridge named bridge (NATBridgeName(name) when ""), or an error
// wrapping ErrNetworkExists when cfg has a network of that name.
func AddNATNetwork(cfg *Config, name, subnet, bridge string) (*Config, error) {
	if slices.ContainsFunc(cfg.Networks, func(n Network) bool { return n.Name == name }) {
		return nil, fmt.Errorf("network %q: %w", name, ErrNetworkExists)
	}
	if bridge == "" {
		bridge = NATBridgeName(name)
	}
	out := cfg.Clone()
	out.Networks = append(out.Networks, Network{Name: name, Type: NetworkNAT, Bridge: bridge, Subnet: subnet})
	return out, nil
}

// DeleteNATNetwork returns cfg without the nat network name, or an error
// wrapping ErrNoSuchNetwork when cfg has none of that name (a bridged
// network of that name is not deleted).
func DeleteNATNetwork(cfg *Config, name string) (*Config, error) {
	i := slices.IndexFunc(cfg.Networks, func(n Network) bool { return n.Name == name && n.Type == NetworkNAT })
	if i < 0 {
		return nil, fmt.Errorf("nat network %q: %w", name, ErrNoSuchNetwork)
	}
	out := cfg.Clone()
	out.Networks = slices.Delete(out.Networks, i, i+1)
	return out, nil
}

// ResetManagementDHCP returns cfg with the management interface reset to
// DHCP on iface: no static addresses, gateway, VLAN or MTU. Bridges, VLANs,
// networks, DNS and the host name stay. It is the way back when the
// management network was configured wrong: iface must be a link of the
// live host (live.Links) and must not be a port of a bridge in cfg (the
// bridge would hold its address); either is refused with a *FieldError
// naming management.interface.
func ResetManagementDHCP(cfg *Config, iface string, live *State) (*Config, error) {
	if fe := validateLinkName("management.interface", iface); fe != nil {
		return nil, fe
	}
	if live.Link(iface) == nil {
		return nil, fieldErr("management.interface", iface, "no such interface on the host")
	}
	if cfg == nil {
		cfg = &Config{APIVersion: APIVersion, Kind: Kind}
	}
	for _, b := range cfg.Bridges {
		if slices.Contains(b.Ports, iface) {
			return nil, fieldErr("management.interface", iface,
				fmt.Sprintf("is a port of bridge %q, which would hold its address; pick another NIC or remove it from the bridge", b.Name))
		}
	}
	out := cfg.Clone()
	out.Management = &Management{Interface: iface, DHCP: true}
	return out, nil
}

// NICs lists the host's physical network interfaces (netlink type
// "device", the loopback left out), in index order: the candidates for
// ResetManagementDHCP.
func (s *State) NICs() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, l := range s.Links {
		if l.Type == "device" && l.Name != "lo" {
			out = append(out, l.Name)
		}
	}
	return out
}
