package hostinfo

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

var osReadlink = os.Readlink

// kvmModuleNames are the x86 KVM modules, the backend ones first.
var kvmModuleNames = []string{"kvm_intel", "kvm_amd", "kvm_pvm", "kvm"}

func (c *collector) kvm(inv *Inventory) {
	inv.KVM.Backend = "none"
	inv.KVM.Modules = []KVMModule{}
	for _, name := range kvmModuleNames {
		dir := filepath.Join("sys/module", name)
		if !c.h.exists(dir) {
			continue
		}
		m := KVMModule{Name: name, Parameters: map[string]string{}}
		params, err := c.h.list(filepath.Join(dir, "parameters"), "")
		if err != nil && !isNotExist(err) {
			c.unknown("kvm.modules["+name+"].parameters", err)
		}
		for _, p := range params {
			v, err := c.h.readString(filepath.Join(dir, "parameters", p))
			if err != nil {
				// some parameters are root-only; say so rather than drop them
				v = "?"
			}
			m.Parameters[p] = v
		}
		inv.KVM.Modules = append(inv.KVM.Modules, m)
		if inv.KVM.Backend == "none" && name != "kvm" {
			inv.KVM.Backend = name
		}
	}
	inv.KVM.DevicePresent = c.h.exists("dev/kvm")
}

// param returns a KVM module parameter and whether it exists.
func (k KVMInfo) param(module, name string) (string, bool) {
	for _, m := range k.Modules {
		if m.Name == module {
			v, ok := m.Parameters[name]
			return v, ok
		}
	}
	return "", false
}

func (c *collector) iommu(inv *Inventory) {
	for _, t := range []string{"DMAR", "IVRS"} {
		if c.h.exists(filepath.Join("sys/firmware/acpi/tables", t)) {
			inv.IOMMU.FirmwareTable = t
		}
	}
	inv.IOMMU.Units = []string{}
	if units, err := c.h.list("sys/class/iommu", ""); err == nil {
		inv.IOMMU.Units = units
	}
	inv.IOMMU.Cmdline = []string{}
	if cmd, err := c.h.readString("proc/cmdline"); err == nil {
		for _, a := range strings.Fields(cmd) {
			if strings.HasPrefix(a, "intel_iommu=") || strings.HasPrefix(a, "amd_iommu=") || strings.HasPrefix(a, "iommu=") || strings.HasPrefix(a, "iommu.") {
				inv.IOMMU.Cmdline = append(inv.IOMMU.Cmdline, a)
			}
		}
	} else {
		c.unknown("iommu.cmdline", err)
	}
	inv.IOMMU.Groups = []IOMMUGroup{}
	groups, err := c.h.list("sys/kernel/iommu_groups", "")
	if err != nil {
		if !isNotExist(err) {
			c.unknown("iommu.groups", err)
		}
		return
	}
	for _, g := range groups {
		id, err := strconv.Atoi(g)
		if err != nil {
			continue
		}
		devs, err := c.h.list(filepath.Join("sys/kernel/iommu_groups", g, "devices"), "")
		if err != nil {
			c.unknown("iommu.groups["+g+"]", err)
			continue
		}
		inv.IOMMU.Groups = append(inv.IOMMU.Groups, IOMMUGroup{ID: id, Devices: devs})
	}
	sort.Slice(inv.IOMMU.Groups, func(i, j int) bool { return inv.IOMMU.Groups[i].ID < inv.IOMMU.Groups[j].ID })
}
