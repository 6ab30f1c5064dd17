package vm

import (
	"time"

	"github.com/virtcon/virtcon/internal/duration"
)

// APIVersion and Kind of the manifest.
const (
	APIVersion = "virtcon/v1"
	Kind       = "VirtualMachine"
	// ReservedLabelPrefix is virtcon's own label namespace; users cannot set it.
	ReservedLabelPrefix = "virtcon.io/"
	// LabelDirectorGeneration carries the director's own generation of a
	// VM it created (CreateOptions.DirectorGeneration): opaque to the
	// host, which keeps it untouched. Local edits bump only
	// metadata.generation, so they never look like cluster drift.
	LabelDirectorGeneration = ReservedLabelPrefix + "director-generation"
)

// VirtualMachine is the manifest: what `virt apply -f` reads and what the
// store keeps.
type VirtualMachine struct {
	APIVersion string   `json:"apiVersion" yaml:"apiVersion"`
	Kind       string   `json:"kind" yaml:"kind"`
	Metadata   Metadata `json:"metadata" yaml:"metadata"`
	Spec       Spec     `json:"spec" yaml:"spec"`
	Status     Status   `json:"status" yaml:"status"`
}

// Metadata identifies a VM. The UID is its identity; the name is a label.
type Metadata struct {
	Name              string            `json:"name" yaml:"name"`
	UID               string            `json:"uid,omitempty" yaml:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Generation        int64             `json:"generation,omitempty" yaml:"generation,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty" yaml:"creationTimestamp,omitempty"`
}

// Spec is the desired VM.
type Spec struct {
	// Running is the desired state: a VM whose spec says running but whose
	// process is gone is MISSING.
	Running   bool       `json:"running" yaml:"running"`
	CPUs      int        `json:"cpus" yaml:"cpus"`
	MemoryMiB int        `json:"memoryMiB" yaml:"memoryMiB"`
	Firmware  string     `json:"firmware" yaml:"firmware"` // uefi or bios
	Machine   string     `json:"machine" yaml:"machine"`   // q35
	Accel     string     `json:"accel" yaml:"accel"`       // auto, kvm or tcg
	Disks     []Disk     `json:"disks,omitempty" yaml:"disks,omitempty"`
	Boot      *Boot      `json:"boot,omitempty" yaml:"boot,omitempty"`
	CloudInit *CloudInit `json:"cloudInit,omitempty" yaml:"cloudInit,omitempty"`
	Network   []NIC      `json:"network,omitempty" yaml:"network,omitempty"`
	// CDROM is a CD drive with an ISO (an installer): it boots after the
	// disks, so a blank disk falls through to it (vm cdrom eject/insert).
	CDROM *CDROM `json:"cdrom,omitempty" yaml:"cdrom,omitempty"`
	// Display: "" or none (serial console only), or vnc (a VGA adapter
	// and a VNC server on a unix socket under the VM's run dir: virt vm
	// display).
	Display string `json:"display,omitempty" yaml:"display,omitempty"`
	// Autostart: `virt host boot` starts the VM (docs/host.md).
	Autostart bool `json:"autostart" yaml:"autostart"`
	// Startup orders the starts at boot. Not under spec.boot, which is
	// direct kernel boot (a kernel is required there).
	Startup *Startup `json:"startup,omitempty" yaml:"startup,omitempty"`
}

// Startup is where a VM goes in the host's boot: lower orders start
// first (VMs of one order by name), each after its delay. Proxmox calls
// it startup order and up.
type Startup struct {
	// Order: 0 (the default) to 9999.
	Order int `json:"order,omitempty" yaml:"order,omitempty"`
	// Delay is waited before this VM starts (at most 1h).
	Delay *duration.Duration `json:"delay,omitempty" yaml:"delay,omitempty"`
}

// StartupOrder is the VM's start order (0 without spec.startup).
func (s Spec) StartupOrder() int {
	if s.Startup == nil {
		return 0
	}
	return s.Startup.Order
}

// StartupDelay is the VM's delay before its start at boot.
func (s Spec) StartupDelay() time.Duration {
	if s.Startup == nil || s.Startup.Delay == nil {
		return 0
	}
	return s.Startup.Delay.D()
}

// Disk is one virtio disk: an overlay on a base image, or a blank disk.
type Disk struct {
	Name  string `json:"name" yaml:"name"`
	Image string `json:"image,omitempty" yaml:"image,omitempty"` // base image name in the image store
	Size  string `json:"size,omitempty" yaml:"size,omitempty"`   // e.g. 10G; grows an overlay or sizes a blank disk
}

// Boot selects direct kernel boot.
type Boot struct {
	Kernel  string `json:"kernel" yaml:"kernel"`
	Initrd  string `json:"initrd,omitempty" yaml:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty" yaml:"cmdline,omitempty"`
}

// CDROM is the VM's CD drive.
type CDROM struct {
	// ISO is the absolute path of an ISO 9660 image on the host, attached
	// read-only; "" is an empty drive (ejected).
	ISO string `json:"iso,omitempty" yaml:"iso,omitempty"`
}

// Display values.
const (
	DisplayNone = "none"
	DisplayVNC  = "vnc"
)

// CloudInit is the NoCloud seed. UserData is a secret: never logged.
type CloudInit struct {
	UserData      string `json:"userData,omitempty" yaml:"userData,omitempty"`
	MetaData      string `json:"metaData,omitempty" yaml:"metaData,omitempty"`
	NetworkConfig string `json:"networkConfig,omitempty" yaml:"networkConfig,omitempty"`
}

// NIC is a VM network interface on a TAP device: on a VM network of
// network.yaml (Network, resolved to its bridge at start) or on a host
// bridge (Bridge). A VM without NICs gets QEMU user-mode networking.
type NIC struct {
	Bridge  string `json:"bridge,omitempty" yaml:"bridge,omitempty"`
	Network string `json:"network,omitempty" yaml:"network,omitempty"`
	MAC     string `json:"mac,omitempty" yaml:"mac,omitempty"`
	Model   string `json:"model,omitempty" yaml:"model,omitempty"`
}

// Status is what virtcon last observed. Phase, PID and Accel are always
// recomputed from the live process; the stored copy is for history.
type Status struct {
	Phase              string     `json:"phase,omitempty" yaml:"phase,omitempty"`
	ObservedGeneration int64      `json:"observedGeneration,omitempty" yaml:"observedGeneration,omitempty"`
	PID                int        `json:"pid,omitempty" yaml:"pid,omitempty"`
	Accel              string     `json:"accel,omitempty" yaml:"accel,omitempty"`
	AccelReason        string     `json:"accelReason,omitempty" yaml:"accelReason,omitempty"`
	StartedAt          *time.Time `json:"startedAt,omitempty" yaml:"startedAt,omitempty"`
	Message            string     `json:"message,omitempty" yaml:"message,omitempty"`
	// Cgroup is the live QEMU's cgroup (vm/scope.go), filled by Get for
	// a running VM; never stored.
	Cgroup *CgroupStatus `json:"cgroup,omitempty" yaml:"cgroup,omitempty"`
}
