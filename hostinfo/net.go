package hostinfo

import (
	"path/filepath"
	"strings"
)

func (c *collector) nics(inv *Inventory) {
	inv.NICs = []NIC{}
	names, err := c.h.list("sys/class/net", "")
	if err != nil {
		c.unknown("nics", err)
		return
	}
	for _, name := range names {
		if name == "lo" || name == "bonding_masters" {
			continue
		}
		dir := filepath.Join("sys/class/net", name)
		n := NIC{Name: name}
		n.MAC = c.str(dir, "address", "nics["+name+"].mac")
		n.State = c.str(dir, "operstate", "nics["+name+"].state")
		// speed is unreadable (EINVAL) or -1 on virtual links and links
		// that are down: unknown, not zero.
		if v, err := c.h.readInt(filepath.Join(dir, "speed")); err == nil && v > 0 {
			s := int(v)
			n.SpeedMbps = &s
		}
		if v, err := c.h.readInt(filepath.Join(dir, "mtu")); err == nil {
			m := int(v)
			n.MTU = &m
		} else {
			c.unknown("nics["+name+"].mtu", err)
		}
		if drv, err := c.h.linkBase(filepath.Join(dir, "device", "driver")); err == nil {
			n.Driver = drv
		}
		if t, err := c.readlinkFull(dir); err == nil {
			n.Virtual = strings.Contains(t, "/devices/virtual/")
			if !n.Virtual {
				// .../0000:00:03.0/net/eth0 or .../0000:00:03.0/virtio0/net/eth0
				parts := strings.Split(t, "/")
				for i := len(parts) - 1; i >= 0; i-- {
					if looksLikePCIAddress(parts[i]) {
						n.PCI = parts[i]
						break
					}
				}
			}
		} else {
			c.unknown("nics["+name+"].virtual", err)
		}
		inv.NICs = append(inv.NICs, n)
	}
}

func (c *collector) readlinkFull(rel string) (string, error) {
	return osReadlink(c.h.path(rel))
}

func looksLikePCIAddress(s string) bool {
	// dddd:bb:dd.f
	return len(s) == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.'
}
