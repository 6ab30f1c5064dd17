package vm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/virtcon/virtcon/internal/redact"
)

// Get returns a VM's manifest with its live status filled in. A guest
// that is not ours but is in `virt vm list` (EXTERNAL, or a live ORPHANED
// QEMU) is returned as its entry alone, with a nil manifest: what is known
// about it, read-only.
func (m *Manager) Get(ctx context.Context, ref string) (*VirtualMachine, *Entry, error) {
	vm, err := m.find(ref)
	var no *NotOursError
	if errors.As(err, &no) {
		return nil, &no.Entry, nil
	}
	if err != nil {
		return nil, nil, err
	}
	e := m.entryFor(vm)
	vm.Status.Cgroup = nil
	if pid := m.livePID(vm.Metadata.UID); pid > 0 {
		argv, _ := m.proc.cmdline(pid)
		m.observeLive(ctx, &e, qemuProcess{PID: pid, Argv: argv})
		vm.Status.Cgroup = m.cgroupOf(pid)
	}
	vm.Status.Phase, vm.Status.PID = e.Phase, e.PID
	if e.PID == 0 && e.Phase != PhaseSaved {
		vm.Status.Phase = PhaseStopped
	}
	return vm, &e, nil
}

// foreign finds a listed guest that is not ours by name or UID. More than
// one of that name is no answer: the caller says not found and the list
// shows them all.
func (m *Manager) foreign(ref string) (*Entry, bool) {
	// every UID with a spec is ours, readable or not
	ours := map[string]bool{}
	vms, errs := m.store.list()
	for _, vm := range vms {
		ours[vm.Metadata.UID] = true
	}
	for _, err := range errs {
		var se *SpecError
		if errors.As(err, &se) {
			ours[se.UID] = true
		}
	}
	entries := m.notOurs(m.proc.scanQEMU(), ours)
	var found *Entry
	for i, e := range entries {
		if e.Class != ClassExternal && !(e.Class == ClassOrphaned && e.PID > 0) {
			continue
		}
		if strings.EqualFold(e.UID, ref) {
			return &entries[i], true
		}
		if e.Name != "" && strings.EqualFold(e.Name, ref) {
			if found != nil {
				return nil, false
			}
			found = &entries[i]
		}
	}
	return found, found != nil
}

// Peek returns a VM's entry from its spec and /proc alone, without asking
// QMP: what a command that just changed the VM prints.
func (m *Manager) Peek(ctx context.Context, ref string) (*Entry, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, err
	}
	return m.PeekVM(vm), nil
}

// PeekVM is Peek of a manifest the caller holds (what Clone returned),
// without looking it up again: a lookup reads every VM's spec.
func (m *Manager) PeekVM(vm *VirtualMachine) *Entry {
	e := m.entryFor(vm)
	if pid := m.livePID(vm.Metadata.UID); pid > 0 {
		e.Class, e.PID, e.Reason, e.Message = ClassManaged, pid, "", ""
		e.Phase = vm.Status.Phase
		if argv, err := m.proc.cmdline(pid); err == nil {
			e.Accel = argAccel(argv)
		}
	}
	return &e
}

// NotOursError is returned when a reference names a guest that virtcon
// lists but does not manage (EXTERNAL, or a live ORPHANED QEMU): nothing
// acts on it.
type NotOursError struct{ Entry Entry }

func (e *NotOursError) Error() string {
	what := e.Entry.Class + " guest"
	if e.Entry.Source != "" {
		what += " of " + e.Entry.Source
	}
	if e.Entry.PID > 0 {
		what += fmt.Sprintf(" (pid %d)", e.Entry.PID)
	}
	return fmt.Sprintf("vm %q: %v: it is an %s, listed read-only", e.Entry.Name, ErrNotOurs, what)
}

// Is makes errors.Is(err, ErrNotOurs) true.
func (e *NotOursError) Is(target error) bool { return target == ErrNotOurs }

// ErrNotOurs is returned when an operation names a guest virtcon lists but
// does not manage.
var ErrNotOurs = errors.New("not managed by virtcon")

// NICStatus is one NIC of a VM as `virt vm show` reports it.
type NICStatus struct {
	Index   int    `json:"index" yaml:"index"`
	Network string `json:"network,omitempty" yaml:"network,omitempty"`
	Bridge  string `json:"bridge,omitempty" yaml:"bridge,omitempty"` // a network's bridge when it resolves
	MAC     string `json:"mac" yaml:"mac"`
	Model   string `json:"model" yaml:"model"`
	TAP     string `json:"tap" yaml:"tap"`
}

// NICs lists the VM's NICs with their TAP devices and, for a VM network,
// the bridge it resolves to now ("" when network.yaml does not say).
func (m *Manager) NICs(ctx context.Context, v *VirtualMachine) []NICStatus {
	out := make([]NICStatus, 0, len(v.Spec.Network))
	for i, n := range v.Spec.Network {
		s := NICStatus{Index: i, Network: n.Network, Bridge: n.Bridge, MAC: n.MAC, Model: n.Model, TAP: m.opts.Net.TAPName(v.Metadata.UID, i)}
		if s.MAC == "" {
			s.MAC = MACFor(v.Metadata.UID, i)
		}
		if n.Network != "" {
			if b, err := m.opts.Net.BridgeFor(n.Network); err == nil {
				s.Bridge = b
			}
		}
		out = append(out, s)
	}
	return out
}

// Redacted returns a copy of v whose cloud-init user data, if any, is
// replaced by redact.Mask: what every face shows unless asked for secrets.
// Applying it back keeps the stored user data (Apply).
func Redacted(v *VirtualMachine) *VirtualMachine {
	c := *v
	if v.Spec.CloudInit != nil && v.Spec.CloudInit.UserData != "" {
		ci := *v.Spec.CloudInit
		ci.UserData = redact.Mask
		c.Spec.CloudInit = &ci
	}
	return &c
}
