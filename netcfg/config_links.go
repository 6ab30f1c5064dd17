package netcfg

// What a configuration asks of each link, derived from the file: the
// links it touches, the management link, MTUs, addresses and the gateway.
// The planner and a try read these.

import (
	"fmt"
	"net/netip"
	"slices"
)

// Links lists every link name the configuration creates or touches:
// bridges and their ports, VLANs and their parents, the management
// interface (and its VLAN). A try snapshots exactly these (plus the links
// of the previously applied configuration, which an apply may delete).
// NAT networks' bridges are not included: the NAT code owns them.
func (c *Config) Links() []string {
	var out []string
	for _, b := range c.Bridges {
		out = append(out, b.Name)
		out = append(out, b.Ports...)
	}
	for _, v := range c.allVLANs() {
		out = append(out, v.Name, v.Link)
	}
	if c.Management != nil {
		out = append(out, c.Management.Interface, c.mgmtLink())
	}
	out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	slices.Sort(out)
	return slices.Compact(out)
}

// mgmtVLANFromList names the VLAN of vlans that is the tagged management
// interface, or "".
func (c *Config) mgmtVLANFromList() string {
	m := c.Management
	if m == nil || m.VLAN == 0 {
		return ""
	}
	for _, v := range c.VLANs {
		if v.Link == m.Interface && v.ID == m.VLAN {
			return v.Name
		}
	}
	return ""
}

// mgmtLink is the link that carries the management addresses: the
// interface, or its VLAN (interface.id) when management.vlan is set.
func (c *Config) mgmtLink() string {
	m := c.Management
	if m == nil {
		return ""
	}
	if m.VLAN == 0 {
		return m.Interface
	}
	if n := c.mgmtVLANFromList(); n != "" {
		return n
	}
	return fmt.Sprintf("%s.%d", m.Interface, m.VLAN)
}

// allVLANs is vlans plus the management VLAN when vlans lacks it.
func (c *Config) allVLANs() []VLAN {
	vs := slices.Clone(c.VLANs)
	if m := c.Management; m != nil && m.VLAN != 0 && c.mgmtVLANFromList() == "" {
		vs = append(vs, VLAN{Name: c.mgmtLink(), Link: m.Interface, ID: m.VLAN, MTU: m.MTU})
	}
	return vs
}

// linkMTU is the MTU the file gives link name (0: none); withMgmt counts
// management.mtu.
func (c *Config) linkMTU(name string, withMgmt bool) int {
	for _, b := range c.Bridges {
		if b.Name == name && b.MTU != 0 {
			return b.MTU
		}
	}
	for _, v := range c.VLANs {
		if v.Name == name && v.MTU != 0 {
			return v.MTU
		}
	}
	if withMgmt && c.Management != nil && c.mgmtLink() == name {
		return c.Management.MTU
	}
	return 0
}

// linkAddrs lists the addresses the file gives each link, links in file
// order. Unparsable ones are left out (Validate reports them).
func (c *Config) linkAddrs() (order []string, addrs map[string][]netip.Prefix) {
	addrs = map[string][]netip.Prefix{}
	add := func(link string, list []string) {
		for _, s := range list {
			p, err := netip.ParsePrefix(s)
			if err != nil || link == "" {
				continue
			}
			if _, seen := addrs[link]; !seen {
				order = append(order, link)
			}
			if !slices.Contains(addrs[link], p) {
				addrs[link] = append(addrs[link], p)
			}
		}
	}
	for _, b := range c.Bridges {
		add(b.Name, b.Addresses)
	}
	for _, v := range c.VLANs {
		add(v.Name, v.Addresses)
	}
	if m := c.Management; m != nil && !m.DHCP {
		add(c.mgmtLink(), m.Addresses)
	}
	return order, addrs
}

// gateway is the management default route, if any.
func (c *Config) gateway() (gw netip.Addr, link string) {
	m := c.Management
	if m == nil || m.DHCP || m.Gateway == "" {
		return netip.Addr{}, ""
	}
	gw, err := netip.ParseAddr(m.Gateway)
	if err != nil {
		return netip.Addr{}, ""
	}
	return gw, c.mgmtLink()
}
