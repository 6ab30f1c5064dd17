package hostinfo

// Inventory is what `virt host info` reports. Every field whose value could
// not be read is left at its zero value or nil AND named in Unknowns with
// the reason, so a missing file is never mistaken for a fact.
type Inventory struct {
	Hostname  string         `json:"hostname" yaml:"hostname"`
	OS        OSInfo         `json:"os" yaml:"os"`
	CPU       CPUInfo        `json:"cpu" yaml:"cpu"`
	Memory    MemoryInfo     `json:"memory" yaml:"memory"`
	NUMA      NUMAInfo       `json:"numa" yaml:"numa"`
	Hugepages HugepageInfo   `json:"hugepages" yaml:"hugepages"`
	PCI       []PCIDevice    `json:"pci" yaml:"pci"`
	GPUs      []GPU          `json:"gpus" yaml:"gpus"`
	NICs      []NIC          `json:"nics" yaml:"nics"`
	Block     []BlockDev     `json:"block" yaml:"block"`
	KVM       KVMInfo        `json:"kvm" yaml:"kvm"`
	IOMMU     IOMMUInfo      `json:"iommu" yaml:"iommu"`
	Unknowns  []UnknownField `json:"unknowns" yaml:"unknowns"`
}

// UnknownField names a part of the inventory that could not be determined.
type UnknownField struct {
	Field  string `json:"field" yaml:"field"`
	Reason string `json:"reason" yaml:"reason"`
}

// OSInfo identifies the operating system and kernel.
type OSInfo struct {
	ID         string `json:"id" yaml:"id"`
	Name       string `json:"name" yaml:"name"`
	Version    string `json:"version" yaml:"version"`
	PrettyName string `json:"prettyName" yaml:"prettyName"`
	Kernel     string `json:"kernel" yaml:"kernel"`
	BootID     string `json:"bootID,omitempty" yaml:"bootID,omitempty"`
}

// CPUInfo describes the processors. Counts are nil when unknown.
type CPUInfo struct {
	Vendor  string `json:"vendor" yaml:"vendor"`
	Model   string `json:"model" yaml:"model"`
	Sockets *int   `json:"sockets" yaml:"sockets"`
	Cores   *int   `json:"cores" yaml:"cores"`
	Threads *int   `json:"threads" yaml:"threads"`
	// VirtFlags are the CPU's virtualisation features (vmx, svm, ept,
	// npt): what lets this host run guests.
	VirtFlags []string `json:"virtFlags" yaml:"virtFlags"`
	// RunsUnderHypervisor is the CPU's "hypervisor" flag: this host is
	// itself a guest. That is no virtualisation feature of its own.
	RunsUnderHypervisor bool `json:"runsUnderHypervisor" yaml:"runsUnderHypervisor"`
	// Hypervisor names the hypervisor this host runs under, when sysfs says.
	Hypervisor string   `json:"hypervisor,omitempty" yaml:"hypervisor,omitempty"`
	Flags      []string `json:"flags" yaml:"flags"`
}

// MemoryInfo is the host's memory in bytes (nil when unknown).
type MemoryInfo struct {
	TotalBytes     *uint64 `json:"totalBytes" yaml:"totalBytes"`
	AvailableBytes *uint64 `json:"availableBytes" yaml:"availableBytes"`
}

// NUMAInfo lists the NUMA nodes; Nodes is nil when the topology is unknown.
type NUMAInfo struct {
	Nodes []NUMANode `json:"nodes" yaml:"nodes"`
}

// NUMANode is one NUMA node.
type NUMANode struct {
	ID            int            `json:"id" yaml:"id"`
	CPUs          string         `json:"cpus" yaml:"cpus"`
	MemTotalBytes *uint64        `json:"memTotalBytes" yaml:"memTotalBytes"`
	MemFreeBytes  *uint64        `json:"memFreeBytes" yaml:"memFreeBytes"`
	Hugepages     []HugepagePool `json:"hugepages" yaml:"hugepages"`
}

// HugepageInfo covers explicit hugepages and transparent hugepages.
type HugepageInfo struct {
	DefaultSizeKiB *uint64          `json:"defaultSizeKiB" yaml:"defaultSizeKiB"`
	Pools          []HugepagePool   `json:"pools" yaml:"pools"`
	Mounts         []HugetlbfsMount `json:"mounts" yaml:"mounts"`
	THP            string           `json:"transparent" yaml:"transparent"`
}

// HugepagePool is the page count for one page size (globally or on one
// node). Reserved is nil per node: the kernel keeps it only globally.
type HugepagePool struct {
	SizeKiB  uint64  `json:"sizeKiB" yaml:"sizeKiB"`
	Total    *uint64 `json:"total" yaml:"total"`
	Free     *uint64 `json:"free" yaml:"free"`
	Reserved *uint64 `json:"reserved,omitempty" yaml:"reserved,omitempty"`
	Surplus  *uint64 `json:"surplus" yaml:"surplus"`
}

// HugetlbfsMount is one mounted hugetlbfs.
type HugetlbfsMount struct {
	Path        string `json:"path" yaml:"path"`
	PageSizeKiB uint64 `json:"pageSizeKiB,omitempty" yaml:"pageSizeKiB,omitempty"`
}

// PCIDevice is one PCI function.
type PCIDevice struct {
	Address    string `json:"address" yaml:"address"`
	VendorID   string `json:"vendorID" yaml:"vendorID"`
	DeviceID   string `json:"deviceID" yaml:"deviceID"`
	Vendor     string `json:"vendor" yaml:"vendor"`
	Product    string `json:"product" yaml:"product"`
	Class      string `json:"class" yaml:"class"` // 6 hex digits, e.g. "030000"
	ClassName  string `json:"className" yaml:"className"`
	Driver     string `json:"driver" yaml:"driver"` // "" when no driver is bound
	IOMMUGroup *int   `json:"iommuGroup" yaml:"iommuGroup"`
	NUMANode   *int   `json:"numaNode" yaml:"numaNode"`
}

// GPU is a display-class PCI device (class 03), whatever its driver.
type GPU struct {
	Address    string   `json:"address" yaml:"address"`
	Vendor     string   `json:"vendor" yaml:"vendor"`
	Product    string   `json:"product" yaml:"product"`
	Driver     string   `json:"driver" yaml:"driver"`
	IOMMUGroup *int     `json:"iommuGroup" yaml:"iommuGroup"`
	GroupPeers []string `json:"groupPeers" yaml:"groupPeers"`
	BootVGA    bool     `json:"bootVGA" yaml:"bootVGA"`
}

// NIC is one network interface.
type NIC struct {
	Name      string `json:"name" yaml:"name"`
	MAC       string `json:"mac" yaml:"mac"`
	State     string `json:"state" yaml:"state"`
	SpeedMbps *int   `json:"speedMbps" yaml:"speedMbps"`
	MTU       *int   `json:"mtu" yaml:"mtu"`
	Driver    string `json:"driver" yaml:"driver"`
	Virtual   bool   `json:"virtual" yaml:"virtual"`
	PCI       string `json:"pciAddress,omitempty" yaml:"pciAddress,omitempty"`
}

// BlockDev is one disk.
type BlockDev struct {
	Name       string `json:"name" yaml:"name"`
	SizeBytes  uint64 `json:"sizeBytes" yaml:"sizeBytes"`
	Type       string `json:"type" yaml:"type"`
	Controller string `json:"controller" yaml:"controller"`
	Vendor     string `json:"vendor" yaml:"vendor"`
	Model      string `json:"model" yaml:"model"`
	Removable  bool   `json:"removable" yaml:"removable"`
}

// KVMInfo is what the kernel says about KVM (not whether it works: that is
// the probe's job).
type KVMInfo struct {
	Backend       string      `json:"backend" yaml:"backend"` // kvm_intel, kvm_amd, kvm_pvm or none
	Modules       []KVMModule `json:"modules" yaml:"modules"`
	DevicePresent bool        `json:"devicePresent" yaml:"devicePresent"`
}

// KVMModule is a loaded KVM module and its parameters.
type KVMModule struct {
	Name       string            `json:"name" yaml:"name"`
	Parameters map[string]string `json:"parameters" yaml:"parameters"`
}

// IOMMUInfo describes DMA remapping.
type IOMMUInfo struct {
	FirmwareTable string       `json:"firmwareTable" yaml:"firmwareTable"` // DMAR, IVRS or ""
	Units         []string     `json:"units" yaml:"units"`                 // /sys/class/iommu entries
	Cmdline       []string     `json:"cmdline" yaml:"cmdline"`             // iommu-related kernel arguments
	Groups        []IOMMUGroup `json:"groups" yaml:"groups"`
}

// IOMMUGroup is one isolation group and the PCI functions in it.
type IOMMUGroup struct {
	ID      int      `json:"id" yaml:"id"`
	Devices []string `json:"devices" yaml:"devices"`
}
