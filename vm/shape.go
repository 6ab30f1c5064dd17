package vm

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// SavedShape is what a migration stream must be loaded into: the machine
// of the QEMU that saved it, read from its command line (not from the
// spec, which may hold a change applied to the running VM and not yet
// realised), and compared with the command line a resume is about to run.
// QEMU refuses, or worse, half loads, a stream into other RAM sizes, vCPUs
// or devices.
type SavedShape struct {
	Machine   string `json:"machine"`
	Firmware  string `json:"firmware"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memoryMiB"`
	// Disks are the guest's disk files (base names) and formats, in order.
	Disks []string `json:"disks,omitempty"`
	// NICs are the NICs' models, MACs and kinds (tap or user), in order.
	NICs []string `json:"nics,omitempty"`
	// DirectBoot: started with -kernel (which adds an option ROM).
	DirectBoot bool `json:"directBoot,omitempty"`
}

// shapeOf reads the shape from a QEMU argv (with or without the binary).
func shapeOf(argv []string) SavedShape {
	s := SavedShape{CPUs: argCPUs(argv), MemoryMiB: argMemoryMiB(argv), Firmware: "bios"}
	if v, ok := argValue(argv, "-machine"); ok {
		for i, p := range splitOpts(v) {
			if k, val, ok := strings.Cut(p, "="); ok && k == "type" {
				s.Machine = val
			} else if !ok && i == 0 {
				s.Machine = p
			}
		}
	}
	netdevs := map[string]string{} // id -> kind
	for i := 0; i+1 < len(argv); i++ {
		val := argv[i+1]
		switch argv[i] {
		case "-kernel":
			s.DirectBoot = true
		case "-netdev":
			parts := splitOpts(val)
			if id, ok := qemuOpt(parts, "id"); ok && len(parts) > 0 {
				netdevs[id] = parts[0]
			}
		case "-drive":
			parts := splitOpts(val)
			if v, _ := qemuOpt(parts, "if"); v == "pflash" {
				s.Firmware = "uefi"
				continue
			}
			if id, _ := qemuOpt(parts, "id"); strings.HasPrefix(id, "disk") {
				file, _ := qemuOpt(parts, "file")
				format, _ := qemuOpt(parts, "format")
				s.Disks = append(s.Disks, fmt.Sprintf("%s (%s)", filepath.Base(file), format))
			}
		}
	}
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] != "-device" {
			continue
		}
		parts := splitOpts(argv[i+1])
		if len(parts) == 0 || (parts[0] != "virtio-net-pci" && parts[0] != "e1000") {
			continue
		}
		mac, _ := qemuOpt(parts, "mac")
		netdev, _ := qemuOpt(parts, "netdev")
		s.NICs = append(s.NICs, fmt.Sprintf("%s %s (%s)", parts[0], mac, netdevs[netdev]))
	}
	return s
}

// qemuOpt is the value of key in QEMU option parts (splitOpts).
func qemuOpt(parts []string, key string) (string, bool) {
	for _, p := range parts {
		if k, v, ok := strings.Cut(p, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// shapeDiffs names what differs between the saved shape and the one about
// to be launched ("spec.memoryMiB 1024, saved with 512"); devices says
// whether the saved one recorded disks, NICs and direct boot (records of
// format 2 on). The machine is compared by the caller (an alias such as
// q35 may name the saved machine type).
func shapeDiffs(saved, now SavedShape, devices bool) []string {
	var diffs []string
	diff := func(what string, saved, now any) {
		if saved != now {
			diffs = append(diffs, fmt.Sprintf("%s %v, saved with %v", what, now, saved))
		}
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return "[" + strings.Join(l, ", ") + "]"
	}
	diff("spec.firmware", saved.Firmware, now.Firmware)
	diff("spec.memoryMiB", saved.MemoryMiB, now.MemoryMiB)
	diff("spec.cpus", saved.CPUs, now.CPUs)
	if devices {
		if !slices.Equal(saved.Disks, now.Disks) {
			diff("spec.disks", list(saved.Disks), list(now.Disks))
		}
		if !slices.Equal(saved.NICs, now.NICs) {
			diff("spec.network", list(saved.NICs), list(now.NICs))
		}
		diff("direct kernel boot (spec.boot.kernel)", saved.DirectBoot, now.DirectBoot)
	}
	return diffs
}
