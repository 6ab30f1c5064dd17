package vm

import (
	"context"
	"fmt"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
)

// SetAutostart sets what `virt host boot` does with the VM: whether it
// starts it (spec.autostart), and where in the boot's order (spec.startup:
// order 0 to MaxStartupOrder, delay up to MaxStartupDelay). A face that
// toggles autostart alone passes the order and delay the VM has (its
// Entry's StartupOrder and StartupDelay).
//
// It is a spec change like any other (metadata.generation bumps), made
// under the VM's lock, so that it cannot undo a concurrent apply. Nothing
// of it lives in QEMU: a running VM whose spec was realised stays so
// (status.observedGeneration follows), and no restart is suggested.
func (m *Manager) SetAutostart(ctx context.Context, ref string, on bool, order int, delay time.Duration) error {
	var errs []*FieldError
	if order < 0 || order > MaxStartupOrder {
		errs = append(errs, fieldErr("spec.startup.order", order, fmt.Sprintf("must be between 0 and %d", MaxStartupOrder)))
	}
	if delay < 0 || delay > MaxStartupDelay {
		errs = append(errs, fieldErr("spec.startup.delay", delay.String(), "must be between 0s and "+MaxStartupDelay.String()))
	}
	if len(errs) > 0 {
		return invalid(errs...)
	}
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return err
	}
	defer l.Release()
	var startup *Startup
	if order != 0 || delay != 0 {
		startup = &Startup{Order: order}
		if delay != 0 {
			d := duration.Duration(delay)
			startup.Delay = &d
		}
	}
	if vm.Spec.Autostart == on && vm.Spec.StartupOrder() == order && vm.Spec.StartupDelay() == delay {
		return nil
	}
	realised := vm.Status.ObservedGeneration == vm.Metadata.Generation && m.livePID(vm.Metadata.UID) > 0
	vm.Spec.Autostart, vm.Spec.Startup = on, startup
	vm.Metadata.Generation++
	if realised {
		vm.Status.ObservedGeneration = vm.Metadata.Generation
	}
	if err := m.store.save(vm); err != nil {
		return fmt.Errorf("vm %q: set autostart: %w", vm.Metadata.Name, err)
	}
	m.log.Info("vm autostart set", "vm", vm.Metadata.Name, "autostart", on, "order", order, "delay", delay)
	return nil
}

// MarkStopped records a VM whose QEMU is gone as stopped (spec.running
// false, phase Stopped): what the host's boot does with a VM that the
// reboot took down and that its policy does not start, so that it is not
// listed MISSING ever after. A VM whose QEMU runs is left alone, checked
// under the VM's lock (a start that won the race is not undone); changed
// says whether anything was written.
func (m *Manager) MarkStopped(ctx context.Context, ref string) (changed bool, err error) {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return false, err
	}
	defer l.Release()
	if !vm.Spec.Running || m.livePID(vm.Metadata.UID) > 0 {
		return false, nil
	}
	vm.Spec.Running = false
	vm.Status.Phase, vm.Status.PID = PhaseStopped, 0
	m.cleanRuntime(vm.Metadata.UID)
	if err := m.store.save(vm); err != nil {
		return false, fmt.Errorf("vm %q: mark stopped: %w", vm.Metadata.Name, err)
	}
	m.log.Info("vm marked stopped: its QEMU is gone", "vm", vm.Metadata.Name)
	return true, nil
}
