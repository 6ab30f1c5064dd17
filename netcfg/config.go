package netcfg

// APIVersion and Kind of network.yaml.
const (
	APIVersion = "virtcon/v1"
	Kind       = "HostNetwork"
)

// Config is the desired host network: /etc/virtcon/network.yaml.
type Config struct {
	APIVersion string      `json:"apiVersion" yaml:"apiVersion"`
	Kind       string      `json:"kind" yaml:"kind"`
	Hostname   string      `json:"hostname,omitempty" yaml:"hostname,omitempty"`
	DNS        DNS         `json:"dns,omitempty" yaml:"dns,omitempty"`
	Management *Management `json:"management,omitempty" yaml:"management,omitempty"`
	Bridges    []Bridge    `json:"bridges,omitempty" yaml:"bridges,omitempty"`
	VLANs      []VLAN      `json:"vlans,omitempty" yaml:"vlans,omitempty"`
	Networks   []Network   `json:"networks,omitempty" yaml:"networks,omitempty"`
}

// DNS servers and search domains for the host, written to
// <root>/etc/resolv.conf by an apply (Hostname goes to <root>/etc/hostname).
// A try's rollback restores links, not these files.
type DNS struct {
	Servers []string `json:"servers,omitempty" yaml:"servers,omitempty"`
	Search  []string `json:"search,omitempty" yaml:"search,omitempty"`
}

// Management is the interface that carries the host's own address. With
// DHCP, Apply brings the interface up and runs virtcon's own detached
// DHCPv4 client on it (the "dhcp-client" child mode, see dhcpMain).
type Management struct {
	// Interface is a link name: a NIC, a bridge or a VLAN from this file.
	Interface string   `json:"interface" yaml:"interface"`
	DHCP      bool     `json:"dhcp,omitempty" yaml:"dhcp,omitempty"`
	Addresses []string `json:"addresses,omitempty" yaml:"addresses,omitempty"` // CIDR, e.g. 192.0.2.10/24
	Gateway   string   `json:"gateway,omitempty" yaml:"gateway,omitempty"`
	VLAN      int      `json:"vlan,omitempty" yaml:"vlan,omitempty"` // 0: untagged
	MTU       int      `json:"mtu,omitempty" yaml:"mtu,omitempty"`
}

// Bridge is a Linux bridge with its uplink ports.
type Bridge struct {
	Name          string   `json:"name" yaml:"name"`
	Ports         []string `json:"ports,omitempty" yaml:"ports,omitempty"`
	STP           bool     `json:"stp,omitempty" yaml:"stp,omitempty"`
	VLANFiltering bool     `json:"vlanFiltering,omitempty" yaml:"vlanFiltering,omitempty"`
	MTU           int      `json:"mtu,omitempty" yaml:"mtu,omitempty"`
	Addresses     []string `json:"addresses,omitempty" yaml:"addresses,omitempty"`
}

// VLAN is an 802.1Q sub-interface.
type VLAN struct {
	Name      string   `json:"name" yaml:"name"` // at most 15 bytes, e.g. eth0.100
	Link      string   `json:"link" yaml:"link"`
	ID        int      `json:"id" yaml:"id"` // 1-4094
	MTU       int      `json:"mtu,omitempty" yaml:"mtu,omitempty"`
	Addresses []string `json:"addresses,omitempty" yaml:"addresses,omitempty"`
}

// Network is a VM network that VM NICs name.
type Network struct {
	Name string `json:"name" yaml:"name"`
	// Type is bridged (VM NICs join Bridge, which has an uplink) or nat (a
	// private subnet on Bridge, which virtcon creates, with DHCP and DNS by
	// dnsmasq and masquerading by nftables).
	Type   string `json:"type" yaml:"type"`
	Bridge string `json:"bridge" yaml:"bridge"`
	// Subnet is the nat network's IPv4 CIDR; the bridge takes its first
	// address, DHCP hands out the upper half.
	Subnet string `json:"subnet,omitempty" yaml:"subnet,omitempty"`
}
