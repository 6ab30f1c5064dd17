// Package hardware is the DCUI's Hardware screen: the hostinfo inventory
// and health checks in one scrollable page with five sections (Summary,
// Checks, PCI & IOMMU, Hugepages, NICs & disks), worded as `virt host
// info` and `virt host check` print them.
//
// It only reads. The inventory and report come from an injected Sources
// through a tea.Cmd; the live source is the host's hostinfo.Assessor,
// whose checks answer the KVM probe from the per-boot cache, so opening
// the screen never runs guest code when `virt host check` or a VM start
// already did. It owns no host logic: formatting only.
package hardware
