package hostinfo

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/jaypipes/ghw"
	"github.com/jaypipes/pcidb"
)

// pciDB parses pci.ids once per process: it is the largest cost of an
// inventory (about 1.5 MB of text).
var pciDB = sync.OnceValues(func() (*pcidb.PCIDB, error) { return pcidb.New() })

// pciClassNames is the fallback when pci.ids is not installed.
var pciClassNames = map[string]string{
	"00": "Unclassified device", "01": "Mass storage controller", "02": "Network controller",
	"03": "Display controller", "04": "Multimedia controller", "05": "Memory controller",
	"06": "Bridge", "07": "Communication controller", "08": "Generic system peripheral",
	"09": "Input device controller", "0c": "Serial bus controller", "0d": "Wireless controller",
	"12": "Processing accelerators", "ff": "Unassigned class",
}

func (c *collector) pci(inv *Inventory) {
	inv.PCI = []PCIDevice{}
	inv.GPUs = []GPU{}
	addrs, err := c.h.list("sys/bus/pci/devices", "")
	if err != nil {
		if isNotExist(err) {
			return // no PCI bus (some containers, non-PCI machines): an empty list is the truth
		}
		c.unknown("pci", err)
		return
	}
	// Names come from pci.ids through ghw; without it we still list the
	// devices by ID and class.
	names := map[string][2]string{}
	classNames := map[string]string{}
	db, err := pciDB()
	if err != nil {
		c.unknown("pci.names", fmt.Errorf("pci.ids: %w", err))
	} else if info, err := ghw.PCI(append(c.ghwArgs(), ghw.WithDisableTopology(), ghw.WithPCIDB(db))...); err != nil {
		c.unknown("pci.names", fmt.Errorf("pci.ids: %w", err))
	} else {
		for _, d := range info.Devices {
			var v, p string
			if d.Vendor != nil {
				v = d.Vendor.Name
			}
			if d.Product != nil {
				p = d.Product.Name
			}
			names[d.Address] = [2]string{v, p}
			if d.Class != nil && d.Class.Name != "" && !strings.EqualFold(d.Class.Name, "unknown") {
				classNames[d.Address] = d.Class.Name
			}
		}
	}
	for _, a := range addrs {
		dir := filepath.Join("sys/bus/pci/devices", a)
		d := PCIDevice{Address: a}
		d.VendorID = strings.TrimPrefix(c.str(dir, "vendor", "pci["+a+"].vendorID"), "0x")
		d.DeviceID = strings.TrimPrefix(c.str(dir, "device", "pci["+a+"].deviceID"), "0x")
		d.Class = strings.TrimPrefix(c.str(dir, "class", "pci["+a+"].class"), "0x")
		if n, ok := names[a]; ok {
			d.Vendor, d.Product = unknownToEmpty(n[0]), unknownToEmpty(n[1])
		}
		d.ClassName = classNames[a]
		if d.ClassName == "" && len(d.Class) >= 2 {
			d.ClassName = pciClassNames[d.Class[:2]]
		}
		if drv, err := c.h.linkBase(filepath.Join(dir, "driver")); err == nil {
			d.Driver = drv
		} else if !isNotExist(err) {
			c.unknown("pci["+a+"].driver", err)
		}
		if g, err := c.h.linkBase(filepath.Join(dir, "iommu_group")); err == nil {
			if n, err := strconv.Atoi(g); err == nil {
				d.IOMMUGroup = &n
			}
		} else if !isNotExist(err) {
			c.unknown("pci["+a+"].iommuGroup", err)
		}
		if n, err := c.h.readInt(filepath.Join(dir, "numa_node")); err == nil && n >= 0 {
			nn := int(n)
			d.NUMANode = &nn
		}
		inv.PCI = append(inv.PCI, d)
	}
	for _, d := range inv.PCI {
		if !strings.HasPrefix(d.Class, "03") {
			continue
		}
		g := GPU{Address: d.Address, Vendor: d.Vendor, Product: d.Product, Driver: d.Driver, IOMMUGroup: d.IOMMUGroup, GroupPeers: []string{}}
		if d.IOMMUGroup != nil {
			for _, o := range inv.PCI {
				if o.Address != d.Address && o.IOMMUGroup != nil && *o.IOMMUGroup == *d.IOMMUGroup {
					g.GroupPeers = append(g.GroupPeers, o.Address)
				}
			}
		}
		if v, err := c.h.readInt(filepath.Join("sys/bus/pci/devices", d.Address, "boot_vga")); err == nil {
			g.BootVGA = v == 1
		}
		inv.GPUs = append(inv.GPUs, g)
	}
}

func unknownToEmpty(s string) string {
	if strings.EqualFold(s, "unknown") {
		return ""
	}
	return s
}

// str reads dir/name, recording an unknown under field when it fails.
func (c *collector) str(dir, name, field string) string {
	v, err := c.h.readString(filepath.Join(dir, name))
	if err != nil {
		c.unknown(field, err)
	}
	return v
}
