package fakehost

import "github.com/virtcon/virtcon/hostinfo"

// Inventory is esx-lab-01 as the status screen and the DCUI's tour show
// it: a two-socket Intel server with VT-d, 256 GiB in two NUMA nodes, a
// 2 MiB hugepage pool, two NICs and one NVMe disk. Each call returns a
// new copy, which the test may change.
func Inventory() *hostinfo.Inventory {
	return &hostinfo.Inventory{
		Hostname: "esx-lab-01",
		OS:       hostinfo.OSInfo{PrettyName: "Debian GNU/Linux 12 (bookworm)", Kernel: "6.1.0-18-amd64"},
		CPU: hostinfo.CPUInfo{Vendor: "GenuineIntel", Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
			Sockets: new(2), Cores: new(64), Threads: new(128), VirtFlags: []string{"vmx", "ept", "vpid"}},
		Memory: hostinfo.MemoryInfo{TotalBytes: new(uint64(256 << 30)), AvailableBytes: new(uint64(201 << 30))},
		NUMA: hostinfo.NUMAInfo{Nodes: []hostinfo.NUMANode{
			{ID: 0, CPUs: "0-31,64-95", MemTotalBytes: new(uint64(128 << 30)), MemFreeBytes: new(uint64(100 << 30))},
			{ID: 1, CPUs: "32-63,96-127", MemTotalBytes: new(uint64(128 << 30)), MemFreeBytes: new(uint64(101 << 30))},
		}},
		Hugepages: hostinfo.HugepageInfo{DefaultSizeKiB: new(uint64(2048)), THP: "madvise",
			Pools: []hostinfo.HugepagePool{{SizeKiB: 2048, Total: new(uint64(1024)), Free: new(uint64(1012)), Reserved: new(uint64(4)), Surplus: new(uint64(0))}}},
		PCI: []hostinfo.PCIDevice{
			{Address: "0000:00:00.0", Vendor: "Intel Corporation", Product: "Ice Lake Memory Map/VT-d", Class: "060000", ClassName: "Host bridge", IOMMUGroup: new(0), NUMANode: new(0)},
			{Address: "0000:31:00.0", Vendor: "Intel Corporation", Product: "Ethernet Controller E810-C", Class: "020000", ClassName: "Ethernet controller", Driver: "ice", IOMMUGroup: new(30), NUMANode: new(1)},
		},
		NICs: []hostinfo.NIC{
			{Name: "eno1", MAC: "3c:ec:ef:12:34:56", State: "up", SpeedMbps: new(25000), Driver: "ice"},
			{Name: "eno2", MAC: "3c:ec:ef:12:34:57", State: "up", SpeedMbps: new(25000), Driver: "ice"},
		},
		Block: []hostinfo.BlockDev{{Name: "nvme0n1", SizeBytes: 1000204886016, Type: "ssd", Controller: "nvme", Vendor: "Samsung", Model: "PM9A3"}},
		KVM:   hostinfo.KVMInfo{Backend: "kvm_intel", DevicePresent: true},
		IOMMU: hostinfo.IOMMUInfo{FirmwareTable: "DMAR", Cmdline: []string{"intel_iommu=on"}, Groups: make([]hostinfo.IOMMUGroup, 2)},
	}
}

// FullInventory is the same host with everything the Hardware screen's
// sections list: hugepage pools per NUMA node and a 1 GiB pool, a
// hugetlbfs mount, a GPU passed through with its audio function in one
// IOMMU group, a BMC's VGA, a bridge, a USB disk, and iommu=pt on the
// kernel command line. Each call returns a new copy.
func FullInventory() *hostinfo.Inventory {
	return &hostinfo.Inventory{
		Hostname: "esx-lab-01",
		OS:       hostinfo.OSInfo{PrettyName: "Debian GNU/Linux 12 (bookworm)", Kernel: "6.1.0-18-amd64"},
		CPU: hostinfo.CPUInfo{Vendor: "GenuineIntel", Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
			Sockets: new(2), Cores: new(64), Threads: new(128), VirtFlags: []string{"vmx", "ept", "vpid"}},
		Memory: hostinfo.MemoryInfo{TotalBytes: new(uint64(256 << 30)), AvailableBytes: new(uint64(201 << 30))},
		NUMA: hostinfo.NUMAInfo{Nodes: []hostinfo.NUMANode{
			{ID: 0, CPUs: "0-31,64-95", MemTotalBytes: new(uint64(128 << 30)), MemFreeBytes: new(uint64(100 << 30)),
				Hugepages: []hostinfo.HugepagePool{{SizeKiB: 2048, Total: new(uint64(512)), Free: new(uint64(500)), Surplus: new(uint64(0))}}},
			{ID: 1, CPUs: "32-63,96-127", MemTotalBytes: new(uint64(128 << 30)), MemFreeBytes: new(uint64(101 << 30)),
				Hugepages: []hostinfo.HugepagePool{{SizeKiB: 2048, Total: new(uint64(512)), Free: new(uint64(512)), Surplus: new(uint64(0))}}},
		}},
		Hugepages: hostinfo.HugepageInfo{
			DefaultSizeKiB: new(uint64(2048)), THP: "madvise",
			Pools: []hostinfo.HugepagePool{
				{SizeKiB: 2048, Total: new(uint64(1024)), Free: new(uint64(1012)), Reserved: new(uint64(4)), Surplus: new(uint64(0))},
				{SizeKiB: 1048576, Total: new(uint64(0)), Free: new(uint64(0)), Reserved: new(uint64(0)), Surplus: new(uint64(0))},
			},
			Mounts: []hostinfo.HugetlbfsMount{{Path: "/dev/hugepages", PageSizeKiB: 2048}},
		},
		PCI: []hostinfo.PCIDevice{
			{Address: "0000:00:00.0", Vendor: "Intel Corporation", Product: "Ice Lake Memory Map/VT-d", Class: "060000", ClassName: "Host bridge", IOMMUGroup: new(0), NUMANode: new(0)},
			{Address: "0000:17:00.0", Vendor: "NVIDIA Corporation", Product: "GA102GL [A40]", Class: "030200", ClassName: "3D controller", Driver: "vfio-pci", IOMMUGroup: new(12), NUMANode: new(0)},
			{Address: "0000:17:00.1", Vendor: "NVIDIA Corporation", Product: "GA102 High Definition Audio", Class: "040300", ClassName: "Audio device", Driver: "vfio-pci", IOMMUGroup: new(12), NUMANode: new(0)},
			{Address: "0000:31:00.0", Vendor: "Intel Corporation", Product: "Ethernet Controller E810-C", Class: "020000", ClassName: "Ethernet controller", Driver: "ice", IOMMUGroup: new(30), NUMANode: new(1)},
			{Address: "0000:03:00.0", VendorID: "1a03", DeviceID: "2000", Class: "030000", ClassName: "VGA compatible controller", Driver: "ast", IOMMUGroup: new(5), NUMANode: new(-1)},
		},
		GPUs: []hostinfo.GPU{
			{Address: "0000:17:00.0", Vendor: "NVIDIA Corporation", Product: "GA102GL [A40]", Driver: "vfio-pci", IOMMUGroup: new(12), GroupPeers: []string{"0000:17:00.1"}},
			{Address: "0000:03:00.0", Driver: "ast", IOMMUGroup: new(5), BootVGA: true},
		},
		NICs: []hostinfo.NIC{
			{Name: "eno1", MAC: "3c:ec:ef:12:34:56", State: "up", SpeedMbps: new(25000), Driver: "ice"},
			{Name: "br0", MAC: "3c:ec:ef:12:34:56", State: "up", Driver: "bridge", Virtual: true},
		},
		Block: []hostinfo.BlockDev{
			{Name: "nvme0n1", SizeBytes: 1000204886016, Type: "ssd", Controller: "nvme", Vendor: "Samsung", Model: "PM9A3"},
			{Name: "sda", SizeBytes: 32 << 30, Type: "hdd", Controller: "usb", Model: "Flash Disk", Removable: true},
		},
		KVM:      hostinfo.KVMInfo{Backend: "kvm_intel", DevicePresent: true},
		IOMMU:    hostinfo.IOMMUInfo{FirmwareTable: "DMAR", Cmdline: []string{"intel_iommu=on", "iommu=pt"}, Groups: make([]hostinfo.IOMMUGroup, 4)},
		Unknowns: []hostinfo.UnknownField{},
	}
}
