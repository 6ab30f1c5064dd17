package vm

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// DefaultStopTimeout is how long a guest gets to power off after the ACPI
// power button when the caller names no timeout.
const DefaultStopTimeout = 60 * time.Second

// StopOptions say how Stop takes a VM down. This is the one definition of
// a stop: every face (virt vm stop, the director's stop-vm, the DCUI, a
// host shutdown) chooses among its three kinds, as libvirt and
// Proxmox do:
//
//   - the zero value, a shutdown: the ACPI power button, then up to
//     Timeout for the guest to power off; a guest still up then is left
//     running, untouched, and the stop fails with *StopTimeoutError
//     (virsh shutdown; qm shutdown --timeout);
//   - Force: the same shutdown, and when Timeout runs out QEMU is ended
//     (QMP quit, then SIGKILL) (qm shutdown --forceStop --timeout);
//   - Now: no power button and no grace: QEMU is ended at once (virsh
//     destroy; qm stop; virt vm kill).
type StopOptions struct {
	// Timeout is the grace: how long the guest gets to power off after
	// the ACPI power button. Zero is DefaultStopTimeout; with Now it
	// must be zero (there is no grace).
	Timeout time.Duration
	// Force ends QEMU (quit, then SIGKILL) when the guest has not
	// powered off by the end of the grace. Without it such a guest runs
	// on and the stop fails with *StopTimeoutError.
	Force bool
	// Now skips the power button and the grace: QEMU is ended at once
	// (quit, then SIGKILL), Force or not.
	Now bool
}

// check refuses options that contradict each other.
func (o StopOptions) check() error {
	switch {
	case o.Timeout < 0:
		return invalid(fieldErr("timeout", o.Timeout.String(), "must not be negative"))
	case o.Now && o.Timeout != 0:
		return invalid(fieldErr("timeout", o.Timeout.String(), "a stop now has no grace: give no timeout with it"))
	}
	return nil
}

// How a VM went down (StopResult.How).
const (
	// StoppedACPI: the guest powered off after the ACPI power button.
	StoppedACPI = "acpi"
	// StoppedQuit: QEMU quit without the guest (it did not power off in
	// time, or the stop was forced).
	StoppedQuit = "quit"
	// StoppedKilled: QEMU was killed (SIGKILL): it answered neither.
	StoppedKilled = "killed"
	// StoppedNotRunning: there was no process to stop.
	StoppedNotRunning = "not-running"
)

// StopResult says how a stop went.
type StopResult struct {
	How  string // Stopped*
	Took time.Duration
}

// Stop takes the VM down as opts say (see StopOptions): the ACPI power
// button and up to the timeout for the guest, then, when forced, QMP quit
// and SIGKILL of the verified PID. A paused guest is resumed first (and
// one suspended to RAM woken): neither sees the power button. Sockets are
// removed, logs kept.
func (m *Manager) Stop(ctx context.Context, ref string, opts StopOptions) error {
	_, err := m.PowerOff(ctx, ref, opts)
	return err
}

// PowerOff is Stop, saying how the VM went down. A Saved VM keeps its
// saved state (only spec.running changes); a running VM's saved state,
// left behind by a resume that could not remove it, is stale and goes.
//
// Only opts.Timeout escalates a forced stop to quit and SIGKILL: when ctx
// ends first, PowerOff returns a *StopInterruptedError (wrapping
// ctx.Err()) and leaves QEMU alone. A stop now is not interrupted. A stop
// that is not forced never ends QEMU: a guest still up after the timeout
// is a *StopTimeoutError.
func (m *Manager) PowerOff(ctx context.Context, ref string, opts StopOptions) (res StopResult, err error) {
	start := time.Now()
	res = StopResult{How: StoppedNotRunning}
	if err := opts.check(); err != nil {
		return res, err
	}
	if opts.Timeout == 0 && !opts.Now {
		opts.Timeout = DefaultStopTimeout
	}
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return res, err
	}
	defer l.Release()
	defer func() { res.Took = time.Since(start) }()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	// Desired state first: a crash mid-stop leaves "spec says stopped"
	// and a new `virt vm stop` finishes the job. Like a start's intent it
	// needs to survive a killed virt, not a power loss (the durable save
	// after the stop confirms it): one fsync less per stop, which a
	// shutdown of many guests at once pays on one journal.
	if vm.Spec.Running {
		vm.Spec.Running = false
		if err := m.store.saveIntent(vm); err != nil {
			return res, err
		}
	}
	pid := m.livePID(uid)
	if pid > 0 && m.anySaved(uid) {
		m.log.Warn("a saved state of a running VM is stale; removing it", "vm", name)
		if err := m.spendSaved(uid); err != nil {
			return res, fmt.Errorf("vm %q: stop: remove the stale saved state: %w", name, err)
		}
	}
	if pid > 0 {
		res.How = StoppedQuit
	}
	tapNS := m.holdTAPNetns(vm, pid)
	defer func() {
		if tapNS != nil {
			tapNS.Close() // a stop that returned before QEMU ended
		}
	}()
	if st, _ := m.proc.state(pid); pid > 0 && st == "T" {
		// a stopped (SIGSTOP) QEMU can answer neither the power button nor
		// quit: only a stop that may end QEMU ends it, and at once
		if !opts.Force && !opts.Now {
			return res, fmt.Errorf("vm %q: stop: QEMU (pid %d) is stopped by a signal and cannot see the ACPI power button; it was left so (only a forced stop ends it): %w", name, pid, ErrStillRunning)
		}
		m.log.Warn("QEMU is stopped by a signal; killing it", "vm", name, "pid", pid)
		opts.Now = true
	}
	if pid > 0 && !opts.Now {
		err := m.qmpDo(ctx, uid, powerdown)
		switch {
		case err != nil && ctx.Err() != nil:
			// only the timeout escalates: an interrupted stop (Ctrl-C, a
			// caller giving up) must not quit or kill a guest that may be
			// shutting down; spec.running is false already
			return res, &StopInterruptedError{Name: name, Err: ctx.Err()}
		case errors.Is(err, errNoGuest):
			m.log.Info("the guest never started; quitting", "vm", name)
		case err != nil && !opts.Force:
			return res, fmt.Errorf("vm %q: stop: the ACPI power button: %w; QEMU was left running (only a forced stop ends it)", name, err)
		case err != nil:
			m.log.Warn("ACPI powerdown failed; will quit", "vm", name, "err", err)
		case m.waitGone(ctx, pid, uid, opts.Timeout):
			pid, res.How = 0, StoppedACPI
		case ctx.Err() != nil:
			return res, &StopInterruptedError{Name: name, Pressed: true, Err: ctx.Err()}
		case !opts.Force:
			return res, &StopTimeoutError{Name: name, Timeout: opts.Timeout}
		default:
			m.log.Warn("guest did not power off in time; sending quit", "vm", name, "timeout", opts.Timeout)
		}
	}
	if st, _ := m.proc.state(pid); pid > 0 && st != "T" {
		if m.quitQEMU(ctx, name, uid, pid) {
			pid = 0
		}
	}
	if pid > 0 {
		res.How = StoppedKilled
		if err := m.killVerified(pid, uid); err != nil {
			return res, fmt.Errorf("vm %q: stop: %w", name, err)
		}
	}
	m.cleanRuntime(uid)
	m.deleteTAPsIn(ctx, vm, tapNS)
	tapNS = nil
	vm.Status.Phase, vm.Status.PID = PhaseStopped, 0
	if m.hasSaved(uid) {
		vm.Status.Phase = PhaseSaved
	}
	return res, m.store.save(vm)
}

// ErrStillRunning: a stop that was not forced left QEMU running, the guest
// not powered off (*StopTimeoutError, or a QEMU stopped by a signal).
var ErrStillRunning = errors.New("the guest is still running")

// StopTimeoutError is a stop without Force whose guest had not powered
// off when its timeout ran out: QEMU was neither quit nor killed. As with
// an interrupted stop, spec.running is already false: the guest may yet
// power off on its own, and a forced stop finishes the job.
type StopTimeoutError struct {
	Name    string
	Timeout time.Duration
}

func (e *StopTimeoutError) Error() string {
	return fmt.Sprintf("vm %q: stop: the guest did not power off within %s of the ACPI power button; QEMU was left running (only a forced stop ends it; spec.running is false)", e.Name, e.Timeout)
}

func (e *StopTimeoutError) Unwrap() error { return ErrStillRunning }

// StopInterruptedError is a graceful stop whose ctx ended before the
// guest powered off (and before its timeout): nothing was escalated to
// quit or SIGKILL. spec.running is already false, so a new stop finishes
// the job; the guest may still be going down meanwhile.
type StopInterruptedError struct {
	Name string
	// Pressed: the ACPI power button was pressed before the interruption.
	Pressed bool
	Err     error // ctx.Err()
}

func (e *StopInterruptedError) Error() string {
	what := "before QEMU confirmed the ACPI power button: the guest may run on"
	if e.Pressed {
		what = "while the guest was powering off (ACPI): it may still be going down, and QEMU was neither quit nor killed"
	}
	return fmt.Sprintf("vm %q: stop interrupted %s; spec.running is false, a new stop finishes the job: %v", e.Name, what, e.Err)
}

func (e *StopInterruptedError) Unwrap() error { return e.Err }

// errNoGuest: the VM never ran guest code (QEMU's prelaunch state).
var errNoGuest = errors.New("the guest never started")

// powerdown presses the ACPI power button where the guest can see it: a
// paused guest is resumed and a guest suspended to RAM woken first.
func powerdown(ctx context.Context, mon *qmp.Monitor) error {
	st, err := mon.Status(ctx)
	if err != nil {
		return err
	}
	switch st.Status {
	case "prelaunch":
		// never ran: no guest OS to shut down, quit is enough
		return errNoGuest
	case "paused":
		if err := mon.Cont(ctx); err != nil {
			return fmt.Errorf("resume before powerdown: %w", err)
		}
	case "suspended":
		if err := mon.SystemWakeup(ctx); err != nil {
			return fmt.Errorf("wake before powerdown: %w", err)
		}
	}
	return mon.SystemPowerdown(ctx)
}

// deleteTAPs removes the VM's TAP devices once its QEMU is gone.
func (m *Manager) deleteTAPs(ctx context.Context, vm *VirtualMachine) {
	for i := range vm.Spec.Network {
		name := m.opts.Net.TAPName(vm.Metadata.UID, i)
		if err := m.opts.Net.DeleteTAP(context.WithoutCancel(ctx), name); err != nil {
			m.log.Warn("TAP not deleted", "vm", vm.Metadata.Name, "tap", name, "err", err)
		}
	}
}

// Kill stops the VM at once with SIGKILL.
func (m *Manager) Kill(ctx context.Context, ref string) error {
	return m.Stop(ctx, ref, StopOptions{Now: true})
}

// killVerified sends SIGKILL to pid only if it still is our QEMU, and
// waits for it to go.
func (m *Manager) killVerified(pid int, uid string) error {
	if !m.proc.owns(pid, uid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	if !m.waitGone(context.Background(), pid, uid, 10*time.Second) {
		return fmt.Errorf("pid %d survived SIGKILL for 10s", pid)
	}
	return nil
}

// waitGone polls until pid no longer is our QEMU or the timeout passes.
func (m *Manager) waitGone(ctx context.Context, pid int, uid string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if m.proc.gone(pid, uid) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		// two small reads of /proc: polling often costs next to nothing,
		// and a guest's power-off (some 50 ms under TCG) is not rounded up
		// to a coarse tick, which a shutdown of many guests pays per guest
		time.Sleep(10 * time.Millisecond)
	}
}
