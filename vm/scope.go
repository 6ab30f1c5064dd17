package vm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/virtcon/virtcon/hostinfo"
)

// Scopes gives each VM's QEMU a cgroup of its own (package systemd: a
// transient scope under virtcon.slice), so that stopping the console,
// web terminal or agent unit that started a VM cannot stop the VM, and
// the host's shutdown reaches the guests' shutdown before their QEMUs.
type Scopes interface {
	// Place moves the running process pid, the QEMU of VM uid (name for
	// the record), into the VM's scope and returns the scope's unit.
	Place(ctx context.Context, uid, name string, pid int) (unit string, err error)
}

// ErrScope is a VM whose QEMU could not be put in its own scope.
var ErrScope = errors.New("cannot put the VM's QEMU in its own cgroup scope")

// ScopeError is a start refused because its QEMU could not be placed in
// its scope; the QEMU was stopped again.
type ScopeError struct {
	Name, Unit string
	Err        error
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("vm %q: start: %v (%s): %v; the QEMU was stopped again", e.Name, ErrScope, e.Unit, e.Err)
}

func (e *ScopeError) Unwrap() []error { return []error{ErrScope, e.Err} }

// placeInScope is the start path's one step for scopes: with Scopes set
// (systemd is PID 1), the new QEMU goes into its scope or the start
// fails and its revert stops the QEMU. A VM left in the caller's cgroup
// would die with the caller's unit (a getty's restart, a web terminal's
// stop, virtcon-guests.service's own stop before it has shut the guest
// down): that is the failure the scopes are there to prevent, so a start
// that cannot have one is refused, never silently degraded. Without
// systemd there is nothing to place and nothing that would stop the VM.
func (m *Manager) placeInScope(ctx context.Context, vm *VirtualMachine, pid int) error {
	if m.opts.Scopes == nil {
		return nil
	}
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	unit, err := m.opts.Scopes.Place(ctx, uid, name, pid)
	if err != nil {
		return &ScopeError{Name: name, Unit: unit, Err: err}
	}
	m.log.Debug("vm in its scope", "vm", name, "pid", pid, "unit", unit)
	return nil
}

// CgroupStatus is where a running VM's QEMU is among the host's cgroups
// and what that cgroup has used (`virt vm show`). Unit is null outside a
// systemd unit; the numbers are null when unknown: when the cgroup is not
// the QEMU's alone (no scope, as without systemd) or the controller is
// not there.
type CgroupStatus struct {
	Path        string   `json:"path" yaml:"path"`
	Unit        *string  `json:"unit" yaml:"unit"`
	CPUSeconds  *float64 `json:"cpuSeconds" yaml:"cpuSeconds"`
	MemoryBytes *uint64  `json:"memoryBytes" yaml:"memoryBytes"`
}

// cgroupOf reads the live QEMU's cgroup; nil when it cannot be read.
func (m *Manager) cgroupOf(pid int) *CgroupStatus {
	pc, err := hostinfo.ReadProcessCgroup(m.opts.HostRoot, pid)
	if err != nil {
		m.log.Debug("vm cgroup unread", "pid", pid, "err", err)
		return nil
	}
	cs := &CgroupStatus{Path: pc.Path, MemoryBytes: pc.MemoryBytes}
	if pc.Unit != "" {
		cs.Unit = &pc.Unit
	}
	if pc.CPU != nil {
		s := float64(*pc.CPU) / float64(time.Second)
		cs.CPUSeconds = &s
	}
	return cs
}
