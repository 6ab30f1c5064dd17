package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/revert"
	"github.com/virtcon/virtcon/qmp"
)

// ErrNotRunning is returned by operations that need a live VM.
var ErrNotRunning = errors.New("not running")

// qmpTimeout bounds one QMP exchange that QEMU answers at once, unless
// Options.QMPTimeout says otherwise (Manager.qmpBound).
const qmpTimeout = 3 * time.Second

// lockedVM resolves ref, takes the VM's lock and reloads its spec under
// it (another process may have changed it while we waited).
func (m *Manager) lockedVM(ctx context.Context, ref string) (*VirtualMachine, *flock.Lock, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, nil, err
	}
	l, err := m.store.lockVM(ctx, vm.Metadata.UID)
	if err != nil {
		return nil, nil, err
	}
	if vm, err = m.store.load(vm.Metadata.UID); err != nil {
		l.Release()
		return nil, nil, err
	}
	return vm, l, nil
}

// Start boots the VM's QEMU, detached: it outlives this process. A VM
// with a saved state (Save) resumes from it.
func (m *Manager) Start(ctx context.Context, ref string) error {
	return m.StartWith(ctx, ref, StartOptions{})
}

// StartOptions tune StartWith.
type StartOptions struct {
	// DiscardSaved throws a saved state away and boots the guest fresh.
	// Without it a VM with a saved state resumes from it, or, when the
	// state cannot be resumed, does not start (*SavedStateError).
	DiscardSaved bool
	// Progress receives what QEMU has loaded of a saved state while it
	// resumes one; nil receives nothing.
	Progress OpProgressFunc
}

// StartWith is Start with options.
func (m *Manager) StartWith(ctx context.Context, ref string, opts StartOptions) error {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return err
	}
	defer l.Release()
	return m.startLocked(ctx, vm, opts)
}

func (m *Manager) startLocked(ctx context.Context, vm *VirtualMachine, opts StartOptions) error {
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	if pid := m.livePID(uid); pid > 0 {
		m.log.Info("vm already running", "vm", name, "pid", pid)
		if !vm.Spec.Running {
			vm.Spec.Running = true
			return m.store.save(vm)
		}
		return nil
	}
	qemuBin, err := m.qemuBinary()
	if err != nil {
		return fmt.Errorf("vm %q: start: %w", name, err)
	}
	// files a linked clone cut short left (linkleft.go): the disk's name
	// is put right before QEMU opens it
	m.cleanLinkLeftovers(ctx, vm, false)
	saved, err := m.prepareResume(vm, opts)
	if err != nil {
		return err
	}
	accel, reason := m.chooseAccel(ctx, vm.Spec.Accel)
	if saved != nil && saved.rec.Accel != "" {
		// a guest resumes on the accelerator it was saved from
		accel, reason = saved.rec.Accel, "resumed from its saved state"
	}
	launch, err := m.launchFor(vm, accel)
	if err != nil {
		return fmt.Errorf("vm %q: start: %w", name, err)
	}
	if saved != nil {
		launch.Incoming = "defer"
		if t := saved.rec.MachineType; t != "" {
			// the very machine type the state was saved from, not an
			// alias a QEMU might resolve otherwise
			launch.Machine = t
		}
	}

	r := revert.New()
	defer r.Fail()
	runDir := m.layout().VMRunDir(uid)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return fmt.Errorf("vm %q: start: %w", name, err)
	}
	m.cleanRuntime(uid)
	r.Add(func() error { m.cleanRuntime(uid); return nil })
	if err := os.MkdirAll(filepath.Dir(launch.SerialLog), 0o700); err != nil {
		return fmt.Errorf("vm %q: start: %w", name, err)
	}
	capLog(launch.SerialLog, serialLogCap)
	if err := writeSeed(launch.Seed, vm); err != nil {
		return fmt.Errorf("vm %q: start: %w", name, err)
	}
	if vm.Spec.Firmware == "uefi" {
		if err := m.ensureVars(launch); err != nil {
			return fmt.Errorf("vm %q: start: %w", name, err)
		}
	}
	for i, nic := range launch.NICs {
		bridge := launch.nicBridges[i]
		if err := m.opts.Net.CreateTAP(ctx, nic.TAP, bridge, 0); err != nil {
			return fmt.Errorf("vm %q: start: spec.network[%d]: %w", name, i, err)
		}
		tap := nic.TAP
		r.Add(func() error { return m.opts.Net.DeleteTAP(context.WithoutCancel(ctx), tap) })
	}
	// Record the intent before the process exists: a crash from here on
	// leaves "spec says running" and either a live QEMU (MANAGED) or none
	// (MISSING), both true statements a later virt can act on.
	if !vm.Spec.Running {
		vm.Spec.Running = true
		if err := m.store.saveIntent(vm); err != nil {
			return err
		}
		r.Add(func() error { vm.Spec.Running = false; return m.store.save(vm) })
	}

	start := time.Now()
	cmd := exec.CommandContext(context.WithoutCancel(ctx), qemuBin, launch.Args()...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // stdout stays /dev/null: no pipe for the daemon to inherit
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("vm %q: start: %s exited: %v: %s", name, filepath.Base(qemuBin), err, lastLines(stderr.String(), 5))
	}
	pid, err := readPIDFile(launch.PIDFile)
	if err != nil || !m.proc.owns(pid, uid) {
		return fmt.Errorf("vm %q: start: qemu daemonized but its pidfile does not name a live QEMU for uid %s (%v)", name, uid, err)
	}
	r.Add(func() error { return m.killVerified(pid, uid) })
	// scopes (vm/scope.go): out of the caller's cgroup before anything else
	if err := m.placeInScope(ctx, vm, pid); err != nil {
		return err
	}
	qctx := ctx
	var resumeErr error
	if saved != nil {
		committed, err := m.resume(ctx, vm, saved, pid, opts.Progress)
		if !committed {
			return err
		}
		// The saved state is spent and this QEMU holds the only copy of
		// the guest (which may run already): nothing may kill it now.
		// What fails from here is reported, and the VM left running.
		r.Success()
		resumeErr, qctx = err, context.WithoutCancel(ctx)
	}
	qctx, cancel := context.WithTimeout(qctx, m.qmpBound())
	defer cancel()
	phase, err := m.queryPhase(qctx, uid)
	if err != nil && saved == nil {
		return fmt.Errorf("vm %q: start: %w", name, err)
	}
	if err != nil {
		phase, resumeErr = PhaseRunning, errors.Join(resumeErr, err)
		if saved.rec.Paused {
			phase = PhasePaused
		}
	}
	now := time.Now().UTC()
	gen := vm.Metadata.Generation
	if saved != nil && saved.rec.Generation > 0 {
		// the resumed guest runs what it was saved with: a change of the
		// spec since (one the resume allows) is not realised until it boots
		gen = saved.rec.Generation
	}
	vm.Status = Status{Phase: phase, PID: pid, Accel: accel, AccelReason: reason, StartedAt: &now, ObservedGeneration: gen}
	if err := m.store.save(vm); err != nil {
		return errors.Join(err, resumeErr)
	}
	if resumeErr != nil {
		return fmt.Errorf("vm %q: start: the guest was resumed and is left as it is: %w", name, resumeErr)
	}
	r.Success()
	m.log.Info("vm started", "vm", name, "pid", pid, "accel", accel, "resumed", saved != nil, "took", time.Since(start))
	return nil
}

// queryPhase asks the VM's QEMU for its run state.
func (m *Manager) queryPhase(ctx context.Context, uid string) (string, error) {
	mon, err := m.dialQMP(ctx, uid)
	if err != nil {
		return "", fmt.Errorf("QMP: %w", err)
	}
	defer mon.Close()
	st, err := mon.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("QMP query-status: %w", err)
	}
	return phaseFromQMP(st.Status), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// launchFor derives the QEMU launch from the spec.
func (m *Manager) launchFor(vm *VirtualMachine, accel string) (Launch, error) {
	uid := vm.Metadata.UID
	l := Launch{
		UID: uid, Name: vm.Metadata.Name, CPUs: vm.Spec.CPUs, MemoryMiB: vm.Spec.MemoryMiB,
		Machine: vm.Spec.Machine, Accel: accel, Firmware: vm.Spec.Firmware, MAC: MACFor(uid, 0),
		Seed:        filepath.Join(m.layout().VMStateDir(uid), "seed.iso"),
		PIDFile:     m.runPath(uid, pidFileName),
		QMPSocket:   m.runPath(uid, qmpSockName),
		EvtSocket:   m.runPath(uid, evtSockName),
		WatchSocket: m.runPath(uid, watchSockName),
		Serial:      m.runPath(uid, serialName),
		AgentSock:   m.runPath(uid, agentSockName),
		SerialLog:   m.SerialLogPath(uid),
	}
	for _, sock := range []string{l.QMPSocket, l.EvtSocket, l.WatchSocket, l.Serial, l.AgentSock, m.runPath(uid, vncSockName)} {
		if len(sock) > MaxSocketPath {
			return l, &SocketPathError{Path: sock, Len: len(sock)}
		}
	}
	if b := vm.Spec.Boot; b != nil {
		l.Kernel, l.Initrd, l.Cmdline = b.Kernel, b.Initrd, b.Cmdline
	}
	for _, d := range vm.Spec.Disks {
		l.Disks = append(l.Disks, LaunchDisk{Name: d.Name, Path: m.diskPath(uid, d.Name), Format: "qcow2"})
	}
	if c := vm.Spec.CDROM; c != nil {
		if c.ISO != "" {
			// checked at admission, and again here: the file may be gone
			if fe := isoFieldError(c.ISO, checkISO); fe != nil {
				return l, invalid(fe)
			}
		}
		l.CDROM = &LaunchCDROM{ISO: c.ISO}
	}
	if vm.Spec.Display == DisplayVNC {
		l.VNC = m.runPath(uid, vncSockName)
	}
	for i, n := range vm.Spec.Network {
		bridge := n.Bridge
		if n.Network != "" {
			b, err := m.opts.Net.BridgeFor(n.Network)
			if err != nil {
				return l, fmt.Errorf("spec.network[%d].network %q: %w", i, n.Network, err)
			}
			bridge = b
		}
		mac := n.MAC
		if mac == "" {
			mac = MACFor(uid, i)
		}
		l.NICs = append(l.NICs, LaunchNIC{TAP: m.opts.Net.TAPName(uid, i), MAC: mac, Model: n.Model})
		l.nicBridges = append(l.nicBridges, bridge)
	}
	if vm.Spec.Firmware == "uefi" {
		code := hostinfo.OVMFPaths(m.opts.HostRoot)
		if len(code) == 0 {
			return l, errors.New("spec.firmware is uefi but no OVMF firmware is installed (apt-get install ovmf), or use firmware: bios")
		}
		l.OVMFCode = code[0]
		l.OVMFVars = filepath.Join(m.layout().VMStateDir(uid), "OVMF_VARS.fd")
	}
	return l, nil
}

// ensureVars gives a UEFI VM its own NVRAM, copied from the template that
// matches the code image.
func (m *Manager) ensureVars(l Launch) error {
	if _, err := os.Stat(l.OVMFVars); err == nil {
		return nil
	}
	tmpl := strings.Replace(l.OVMFCode, "OVMF_CODE", "OVMF_VARS", 1)
	if tmpl == l.OVMFCode {
		tmpl = filepath.Join(filepath.Dir(l.OVMFCode), "OVMF_VARS.fd")
	}
	b, err := os.ReadFile(tmpl)
	if err != nil {
		return fmt.Errorf("OVMF variables template: %w", err)
	}
	return os.WriteFile(l.OVMFVars, b, 0o600)
}

// cleanRuntime removes sockets and the pidfile; logs stay.
func (m *Manager) cleanRuntime(uid string) {
	for _, n := range []string{pidFileName, qmpSockName, evtSockName, watchSockName, serialName, agentSockName, vncSockName} {
		os.Remove(m.runPath(uid, n))
	}
}

func phaseFromQMP(s string) string {
	switch s {
	case "running":
		return PhaseRunning
	case "paused", "prelaunch", "suspended", "inmigrate", "postmigrate", "finish-migrate", "save-vm", "restore-vm", "debug", "watchdog", "colo":
		return PhasePaused
	case "shutdown":
		return PhaseShuttingDown
	case "guest-panicked", "internal-error", "io-error":
		return PhaseError
	}
	return PhaseRunning
}

// Phases as listed.
const (
	PhaseRunning      = "Running"
	PhasePaused       = "Paused"
	PhaseStopped      = "Stopped"
	PhaseUnresponsive = "Unresponsive"
	PhaseShuttingDown = "ShuttingDown"
	PhaseError        = "Error"
	// PhaseUnknown: no process and no readable spec to tell.
	PhaseUnknown = "Unknown"
)

// qmpDo runs f on a fresh QMP session with a deadline.
func (m *Manager) qmpDo(ctx context.Context, uid string, f func(context.Context, *qmp.Monitor) error) error {
	// the dial and f each get a bound: a sweep in the dial (dialQMP) may
	// take its own, longer one
	dctx, cancel := context.WithTimeout(ctx, m.qmpBound())
	mon, err := m.dialQMP(dctx, uid)
	cancel()
	if err != nil {
		return err
	}
	defer mon.Close()
	ctx, cancel = context.WithTimeout(ctx, m.qmpBound())
	defer cancel()
	return f(ctx, mon)
}

// dialQMP connects to the VM's QMP socket. QEMU serves one client at a
// time and refuses connections once its short queue is full, so a busy
// socket (another virt listing the VM) is retried until ctx's deadline.
// The first session under a hold of the VM's lock first cancels what an
// interrupted clone left in that QEMU (sweepLeftovers).
func (m *Manager) dialQMP(ctx context.Context, uid string) (*qmp.Monitor, error) {
	mon, err := m.dialQMPOnly(ctx, uid)
	if err != nil || !m.needsSweep(uid) {
		return mon, err
	}
	// the sweep cancels jobs and deletes nodes in a QEMU that may be busy
	// with them: on its own bound, not on what is left of the caller's
	// (often one exchange's), and a session it closed is dialled anew
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.busyQMPBound())
	m.sweepLeftovers(sctx, mon, uid)
	cancel()
	if mon.Closed() {
		mon.Close()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.qmpBound())
		defer cancel()
		return m.dialQMPOnly(rctx, uid)
	}
	return mon, nil
}

// dialQMPOnly is dialQMP without the sweep.
func (m *Manager) dialQMPOnly(ctx context.Context, uid string) (*qmp.Monitor, error) {
	delay := 2 * time.Millisecond
	for {
		mon, err := qmp.Dial(ctx, m.runPath(uid, qmpSockName), qmp.Options{Logger: m.log})
		if err == nil || !errors.Is(err, qmp.ErrBusy) {
			return mon, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// qmpOp runs one QMP operation on a running VM under its lock. When
// runs, the guest runs (again) after f: a saved state of the VM is spent
// from then on and goes first (see spendSaved).
func (m *Manager) qmpOp(ctx context.Context, ref, what string, runs bool, f func(context.Context, *qmp.Monitor) error) error {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return err
	}
	defer l.Release()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	if m.livePID(uid) == 0 {
		return fmt.Errorf("vm %q: %s: %w", name, what, ErrNotRunning)
	}
	if runs && m.anySaved(uid) {
		// a save whose virt died between the record and QEMU's quit
		// leaves the guest paused beside a valid state: once the guest
		// runs on, a start must never load that state again
		m.log.Warn("the running VM has a saved state; removing it before the guest runs on", "vm", name, "op", what)
		if err := m.spendSaved(uid); err != nil {
			return fmt.Errorf("vm %q: %s: remove the saved state first: %w", name, what, err)
		}
	}
	if err := m.qmpDo(ctx, uid, f); err != nil {
		return fmt.Errorf("vm %q: %s: %w", name, what, err)
	}
	return nil
}

// Reboot resets the VM (a hard reset, like the reset button).
func (m *Manager) Reboot(ctx context.Context, ref string) error {
	return m.qmpOp(ctx, ref, "reboot", true, func(ctx context.Context, mon *qmp.Monitor) error { return mon.SystemReset(ctx) })
}

// Pause freezes the vCPUs.
func (m *Manager) Pause(ctx context.Context, ref string) error {
	return m.qmpOp(ctx, ref, "pause", false, func(ctx context.Context, mon *qmp.Monitor) error { return mon.Stop(ctx) })
}

// Resume continues paused vCPUs.
func (m *Manager) Resume(ctx context.Context, ref string) error {
	return m.qmpOp(ctx, ref, "resume", true, func(ctx context.Context, mon *qmp.Monitor) error { return mon.Cont(ctx) })
}

// ErrRunning is returned when deleting a running VM without force.
var ErrRunning = errors.New("is running")

// Delete removes a VM: its spec, disks, seed, runtime files and logs.
// A running VM is refused unless force, which kills it first; a VM with
// snapshots is refused (*HasSnapshotsError): DeleteWith WithSnapshots.
func (m *Manager) Delete(ctx context.Context, ref string, force bool) error {
	return m.DeleteWith(ctx, ref, DeleteOptions{Force: force})
}

// DeleteWith is Delete with options.
func (m *Manager) DeleteWith(ctx context.Context, ref string, o DeleteOptions) error {
	force := o.Force
	vm, err := m.find(ref)
	if err != nil {
		return err
	}
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return err
	}
	defer g.Release()
	l, err := m.store.lockVM(ctx, vm.Metadata.UID)
	if err != nil {
		return err
	}
	defer l.Release()
	uid := vm.Metadata.UID
	pid := m.livePID(uid)
	if pid > 0 && !force {
		return &RunningError{Name: vm.Metadata.Name, Op: "delete", PID: pid}
	}
	if err := m.checkNoLinkedClones(vm); err != nil {
		return err // a clone must never lose its backing file
	}
	if !o.WithSnapshots {
		// snapshots live in the disks: fail closed when they cannot be read
		names, err := m.snapshotNamesLocked(ctx, vm)
		if err != nil {
			return fmt.Errorf("vm %q: delete: cannot tell whether it has snapshots: %w", vm.Metadata.Name, err)
		}
		if len(names) > 0 {
			return &HasSnapshotsError{VM: vm.Metadata.Name, Snapshots: names}
		}
	}
	tapNS := m.holdTAPNetns(vm, pid)
	if pid > 0 {
		if err := m.killVerified(pid, uid); err != nil {
			if tapNS != nil {
				tapNS.Close()
			}
			return fmt.Errorf("vm %q: delete: %w", vm.Metadata.Name, err)
		}
	}
	m.deleteTAPsIn(ctx, vm, tapNS)
	// The spec goes first: once it is gone the VM no longer exists, and
	// anything left after a crash here is an orphan that gc can list.
	if err := os.Remove(m.store.specPath(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("vm %q: delete: %w", vm.Metadata.Name, err)
	}
	var errs []error
	for _, d := range []string{m.layout().VMStateDir(uid), m.layout().VMRunDir(uid), filepath.Dir(m.SerialLogPath(uid))} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	os.Remove(m.store.lockPath("vm-" + uid))
	m.log.Info("vm deleted", "vm", vm.Metadata.Name, "uid", uid)
	return errors.Join(errs...)
}
