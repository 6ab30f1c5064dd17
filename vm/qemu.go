package vm

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
)

// Launch is everything the QEMU command line is built from.
type Launch struct {
	UID, Name string
	CPUs      int
	MemoryMiB int
	Machine   string
	Accel     string // kvm or tcg
	Firmware  string // uefi or bios
	OVMFCode  string // uefi only
	OVMFVars  string // uefi only: the VM's own copy
	Disks     []LaunchDisk
	Seed      string // NoCloud seed ISO, "" for none
	// CDROM is the VM's CD drive (spec.cdrom): nil for none. It boots
	// after the disks, so a blank disk falls through to the installer
	// and an installed one boots itself.
	CDROM *LaunchCDROM
	// VNC is the VNC server's unix socket (spec.display: vnc), with a
	// VGA adapter and a USB tablet; "" for no display.
	VNC     string
	Kernel  string
	Initrd  string
	Cmdline string
	MAC     string      // user-mode NIC's MAC, when NICs is empty
	NICs    []LaunchNIC // TAP NICs on host bridges

	nicBridges []string // the bridge of each NIC, for creating its TAP

	// Incoming, when set, starts QEMU waiting for a migration stream
	// (-incoming): "defer" waits for QMP's migrate-incoming (a resume).
	Incoming string

	PIDFile   string
	QMPSocket string
	EvtSocket string
	// WatchSocket is a third QMP socket for `virt vm events` (the agent's
	// inventory holds EvtSocket; a QMP socket serves one client); "" none.
	WatchSocket string
	Serial      string
	SerialLog   string
	AgentSock   string
}

// LaunchNIC is one NIC on a TAP device.
type LaunchNIC struct {
	TAP   string
	MAC   string
	Model string // virtio or e1000
}

// LaunchDisk is one disk file.
type LaunchDisk struct {
	Name   string // spec.disks[].name: the device ids are made from it
	Path   string
	Format string // qcow2 or raw
}

// LaunchCDROM is the CD drive; an empty ISO is an empty (ejected) drive.
type LaunchCDROM struct {
	ISO string
}

// Device ids. Disks and TAP NICs each sit on their own PCIe root port
// (q35's root bus takes no hot-plug), named after the device, so that any
// of them can be hot-unplugged and the ids never shift when one goes;
// HotplugPorts more ports are left free for devices hot-plugged into the
// running VM (hotplugPortID). A device hot-plugged is cold-plugged on its
// own port at the next start.
const (
	// HotplugPorts is how many free root ports a VM starts with.
	HotplugPorts = 4
	// CDROMDeviceID is the CD drive's device; its drive is CDROMDriveID.
	CDROMDeviceID = "cd0"
	CDROMDriveID  = "cdrom"
)

// DiskDriveID is the block backend (-drive id / node) of the named disk.
// The "disk" prefix is what shapeOf looks for.
func DiskDriveID(name string) string { return "disk-" + name }

// DiskDeviceID is the virtio-blk device (device_del's id) of the named disk.
func DiskDeviceID(name string) string { return "blk-" + name }

// NICDeviceID is the NIC's device id, made from its MAC (a NIC has no
// name; its MAC is unique on the VM and stays when another NIC goes).
func NICDeviceID(mac string) string {
	return "nic-" + strings.ReplaceAll(strings.ToLower(mac), ":", "")
}

// NICNetdevID is the NIC's netdev (TAP backend) id.
func NICNetdevID(mac string) string {
	return "net-" + strings.ReplaceAll(strings.ToLower(mac), ":", "")
}

// portID is the root port of a cold-plugged device.
func portID(deviceID string) string { return "rp-" + deviceID }

// hotplugPortID is the i-th free root port.
func hotplugPortID(i int) string { return fmt.Sprintf("rp-hp%d", i) }

// escapeOpt escapes a value for QEMU's option parser (QemuOpts): a comma
// is written twice. The argv is passed directly to QEMU, never through a
// shell, so quotes and spaces need nothing.
func escapeOpt(v string) string { return strings.ReplaceAll(v, ",", ",,") }

// Args builds the QEMU argv (without the binary).
func (l Launch) Args() []string {
	a := []string{
		"-name", "guest=" + escapeOpt(l.Name) + ",debug-threads=on",
		"-uuid", l.UID,
		"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", escapeOpt(l.Machine),
		"-accel", l.Accel,
		"-smp", strconv.Itoa(l.CPUs),
		"-m", strconv.Itoa(l.MemoryMiB),
		"-daemonize", "-pidfile", l.PIDFile,
		// path= is explicit: the implied first key would read a path
		// holding '=' (before any comma) as key=value.
		"-qmp", "unix:path=" + escapeOpt(l.QMPSocket) + ",server=on,wait=off",
		"-qmp", "unix:path=" + escapeOpt(l.EvtSocket) + ",server=on,wait=off",
		"-chardev", "socket,id=serial0,path=" + escapeOpt(l.Serial) + ",server=on,wait=off,logfile=" + escapeOpt(l.SerialLog) + ",logappend=on",
		"-serial", "chardev:serial0",
		"-msg", "timestamp=on",
	}
	if l.WatchSocket != "" {
		a = append(a, "-qmp", "unix:path="+escapeOpt(l.WatchSocket)+",server=on,wait=off")
	}
	if l.Accel == "kvm" {
		a = append(a, "-cpu", "host")
	} else {
		a = append(a, "-cpu", "max")
	}
	if l.Firmware == "uefi" {
		a = append(a,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+escapeOpt(l.OVMFCode),
			"-drive", "if=pflash,format=raw,unit=1,file="+escapeOpt(l.OVMFVars))
	}
	chassis := 0
	port := func(dev string) string {
		chassis++
		a = append(a, "-device", fmt.Sprintf("pcie-root-port,id=%s,chassis=%d,bus=pcie.0", portID(dev), chassis))
		return portID(dev)
	}
	for i, d := range l.Disks {
		drive, dev := DiskDriveID(d.Name), DiskDeviceID(d.Name)
		bus := port(dev)
		a = append(a,
			"-drive", "file="+escapeOpt(d.Path)+",format="+d.Format+",if=none,id="+drive+",discard=unmap",
			"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,id=%s,bus=%s,serial=%s,bootindex=%d", drive, dev, bus, escapeOpt(d.Name), i+1))
	}
	if c := l.CDROM; c != nil {
		// on its own virtio-scsi controller, as the seed (slim kernels
		// have no AHCI); media=cdrom without a file is an empty drive
		drive := "if=none,id=" + CDROMDriveID + ",media=cdrom,readonly=on"
		if c.ISO != "" {
			drive = "file=" + escapeOpt(c.ISO) + ",format=raw," + drive
		}
		a = append(a,
			"-device", "virtio-scsi-pci,id=cdscsi",
			"-drive", drive,
			"-device", fmt.Sprintf("scsi-cd,bus=cdscsi.0,drive=%s,id=%s,bootindex=%d", CDROMDriveID, CDROMDeviceID, len(l.Disks)+1))
	}
	if l.Seed != "" {
		// The seed is a read-only CD on its own virtio-scsi controller, not
		// an ide-cd on q35's AHCI: Debian's cloud kernels (and other slim
		// cloud kernels) carry no AHCI driver and would never see it. No
		// bootindex: the firmware boots the disks (which have one) and
		// never the seed ahead of them; OVMF drops it from BootOrder.
		a = append(a,
			"-device", "virtio-scsi-pci,id=seedscsi",
			"-drive", "file="+escapeOpt(l.Seed)+",format=raw,if=none,id=seed,media=cdrom,readonly=on",
			"-device", "scsi-cd,bus=seedscsi.0,drive=seed")
	}
	a = append(a,
		"-device", "virtio-rng-pci",
		"-chardev", "socket,id=qga0,path="+escapeOpt(l.AgentSock)+",server=on,wait=off",
		"-device", "virtio-serial-pci,id=vser0",
		"-device", "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
	)
	// no iPXE option ROM (romfile=): VMs boot from disk or kernel, never PXE
	if len(l.NICs) == 0 {
		a = append(a, "-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0,romfile=,mac="+l.MAC)
	}
	for _, n := range l.NICs {
		dev := "virtio-net-pci"
		if n.Model == "e1000" {
			dev = "e1000"
		}
		id, netdev := NICDeviceID(n.MAC), NICNetdevID(n.MAC)
		bus := port(id)
		a = append(a,
			"-netdev", fmt.Sprintf("tap,id=%s,ifname=%s,script=no,downscript=no", netdev, escapeOpt(n.TAP)),
			"-device", fmt.Sprintf("%s,netdev=%s,id=%s,bus=%s,romfile=,mac=%s", dev, netdev, id, bus, n.MAC))
	}
	for i := range HotplugPorts {
		chassis++
		a = append(a, "-device", fmt.Sprintf("pcie-root-port,id=%s,chassis=%d,bus=pcie.0", hotplugPortID(i), chassis))
	}
	if l.VNC != "" {
		a = append(a,
			"-device", "VGA",
			"-device", "qemu-xhci,id=usb",
			"-device", "usb-tablet,bus=usb.0",
			// vnc= is explicit: the implied key would read a path
			// holding '=' as key=value (as -qmp's path=)
			"-vnc", "vnc=unix:"+escapeOpt(l.VNC))
	}
	if l.Incoming != "" {
		a = append(a, "-incoming", l.Incoming)
	}
	if l.Kernel != "" {
		a = append(a, "-kernel", l.Kernel)
		if l.Initrd != "" {
			a = append(a, "-initrd", l.Initrd)
		}
		if l.Cmdline != "" {
			a = append(a, "-append", l.Cmdline)
		}
	}
	return a
}

// MACFor derives a stable locally administered MAC from the VM's UID and
// the NIC index, in QEMU's 52:54:00 range.
func MACFor(uid string, index int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", uid, index)))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
}
