package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// savedResume is a saved state checked and ready to load.
type savedResume struct {
	path string
	rec  *SavedState
	// specMachine, when set, is the spec's machine, which names the saved
	// machine type only if it is its alias (q35 for pc-q35-7.2): the QEMU
	// about to load the state says (query-machines).
	specMachine string
}

// prepareResume checks the VM's saved state before QEMU starts: nil when
// there is none (or it was discarded on request), else the state to load.
// A state that cannot be resumed is a *SavedStateError and nothing is
// started.
func (m *Manager) prepareResume(vm *VirtualMachine, opts StartOptions) (*savedResume, error) {
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	switch record, stream := m.savedFiles(uid); {
	case !record && !stream:
		os.Remove(m.savedStatePath(uid) + ".tmp") // a save cut short: the guest ran on
		return nil, nil
	case !record, !stream:
		// A save writes the stream, then the record; a removal deletes the
		// record, then the stream: one without the other is what either
		// left when cut short (or an older virt's removal, stream first),
		// never a state to resume.
		m.log.Warn("a saved state's leftover is removed (an interrupted save or removal); booting fresh", "vm", name, "record", record, "stream", stream)
		if err := m.removeSaved(uid); err != nil {
			return nil, fmt.Errorf("vm %q: remove the leftover of a saved state: %w", name, err)
		}
		return nil, nil
	}
	if opts.DiscardSaved {
		if err := m.removeSaved(uid); err != nil {
			return nil, fmt.Errorf("vm %q: discard the saved state: %w", name, err)
		}
		m.log.Warn("saved state discarded; booting fresh", "vm", name)
		return nil, nil
	}
	path := m.savedStatePath(uid)
	fail := func(reason, format string, a ...any) error {
		return &SavedStateError{Name: name, Path: path, Reason: reason, Detail: fmt.Sprintf(format, a...)}
	}
	rec, err := m.readSavedRecord(vm)
	if err != nil {
		return nil, err
	}
	if at := vm.Status.StartedAt; at != nil && rec.SavedAt.Before(*at) {
		return nil, fail(SavedStale, "saved at %s, but the VM started since, at %s: its disks have moved on from it",
			rec.SavedAt.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
	}
	// the launch about to be done, against the one that saved the state
	launch, err := m.launchFor(vm, rec.Accel)
	if err != nil {
		return nil, fmt.Errorf("vm %q: start: %w", name, err)
	}
	now := shapeOf(launch.Args())
	diffs := shapeDiffs(rec.SavedShape, now, rec.Format >= 2)
	var specMachine string
	switch {
	case now.Machine == rec.Machine, now.Machine == rec.MachineType:
	case rec.MachineType != "":
		// q35 against a saved pc-q35-7.2 (a QEMU started with the type it
		// had resolved, by an earlier resume): QEMU tells
		specMachine = now.Machine
	default:
		diffs = append([]string{fmt.Sprintf("spec.machine %s, saved with %s", now.Machine, rec.Machine)}, diffs...)
	}
	if len(diffs) > 0 {
		return nil, fail(SavedSpecChanged, "%s", strings.Join(diffs, "; "))
	}
	size, sum, err := hashFile(path)
	switch {
	case err != nil:
		return nil, fail(SavedCorrupt, "%v", err)
	case size != rec.Size:
		return nil, fail(SavedCorrupt, "%d bytes, saved %d", size, rec.Size)
	case sum != rec.SHA256:
		return nil, fail(SavedCorrupt, "sha256 %s, saved %s", sum, rec.SHA256)
	}
	return &savedResume{path: path, rec: rec, specMachine: specMachine}, nil
}

// exitWait is how long a QEMU whose monitor hung up during a resume gets
// to be gone from /proc before it counts as alive (and not answering).
const exitWait = 5 * time.Second

// resume loads the saved state into a QEMU started with -incoming defer,
// after checking that it is the QEMU that saved it, removes the state, and
// lets the guest run on (unless it was saved paused).
//
// The state goes before the guest may run: once it has run, its disks have
// moved on, and a later start that loaded the state again would corrupt
// its file systems. committed says the state's record is gone: from then on
// this QEMU holds the only copy of the guest, and the caller must not kill
// it, whatever fails after (it reports the error and leaves the VM be).
// Before that, a failure leaves the state whole: the guest never ran.
func (m *Manager) resume(ctx context.Context, vm *VirtualMachine, s *savedResume, pid int, progress OpProgressFunc) (committed bool, err error) {
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	fail := func(reason, format string, a ...any) error {
		return &SavedStateError{Name: name, Path: s.path, Reason: reason, Detail: fmt.Sprintf(format, a...)}
	}
	ctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	defer cancel()
	cmd := func(f func(context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, m.qmpBound())
		defer cancel()
		return f(c)
	}
	var mon *qmp.Monitor
	if err := cmd(func(c context.Context) (err error) { mon, err = m.dialQMP(c, uid); return err }); err != nil {
		return false, fmt.Errorf("vm %q: start: QMP: %w", name, err)
	}
	defer mon.Close()
	// The stream's format follows QEMU's version (major.minor.micro); a
	// rebuild of the same version (a distribution's revision: Debian's
	// 1:7.2+dfsg-7+deb12u18 after u17) loads it alike.
	v := mon.Greeting().Version
	if v.String() != s.rec.QEMUVersion {
		return false, fail(SavedOtherQEMU, "saved by QEMU %s (%s), this is QEMU %s (%s)", s.rec.QEMUVersion, s.rec.QEMUPackage, v.String(), v.Package)
	}
	if v.Package != s.rec.QEMUPackage {
		m.log.Warn("saved state written by another build of the same QEMU version; resuming", "vm", name,
			"qemu", v.String(), "saved-package", s.rec.QEMUPackage, "package", v.Package)
	}
	if s.specMachine != "" {
		var machines []qmp.MachineInfo
		if err := cmd(func(c context.Context) (err error) { machines, err = mon.QueryMachines(c); return err }); err != nil {
			return false, fmt.Errorf("vm %q: start: QMP query-machines: %w", name, err)
		}
		if got := resolveMachine(machines, s.specMachine); got != s.rec.MachineType {
			return false, fail(SavedSpecChanged, "spec.machine %s (%s), saved with %s", s.specMachine, got, s.rec.MachineType)
		}
	}
	f, err := os.Open(s.path)
	if err != nil {
		return false, fail(SavedCorrupt, "%v", err)
	}
	defer f.Close()
	if err := cmd(func(c context.Context) error { return mon.SendFD(c, resumeFDName, f) }); err != nil {
		return false, fmt.Errorf("vm %q: start: pass the saved state to QEMU: %w", name, err)
	}
	// QEMU ends when it cannot load a stream: its monitor hangs up before
	// the process is gone from /proc, so a failed exchange waits a moment
	// for it to be reaped before it tells "exited" from "did not answer"
	exited := func() bool {
		return ctx.Err() == nil && m.waitGone(ctx, pid, uid, exitWait)
	}
	// QEMU reads the stream through a copy of f's descriptor, which shares
	// its offset: how far it has read
	op := newLongOp(name, "loading saved state", progress, func() (int64, int64, bool) {
		at, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1, s.rec.Size, false
		}
		return at, s.rec.Size, false
	})
	defer op.tell(true)
	// migrate-incoming and the polls after it are bounded by the resume's
	// deadline: QEMU loads a stream from a file in its main loop, and
	// answers nothing until it is done
	if err := m.execLong(ctx, mon, op, "migrate-incoming", map[string]string{"uri": "fd:" + resumeFDName}, nil); err != nil {
		if exited() {
			return false, fail(SavedCorrupt, "QEMU exited while loading it: %v", err)
		}
		return false, fmt.Errorf("vm %q: start: migrate-incoming: %w", name, err)
	}
	info, err := m.waitMigration(ctx, mon, op, func() bool { return m.proc.gone(pid, uid) })
	switch {
	case err != nil && exited():
		return false, fail(SavedCorrupt, "QEMU exited while loading it (%v)", err)
	case err != nil:
		return false, fmt.Errorf("vm %q: start: load the saved state: %w", name, err)
	case info.Status != qmp.MigrationCompleted:
		return false, fail(SavedCorrupt, "QEMU could not load it: %s %s", info.Status, info.ErrorDesc)
	}
	// Loaded, and the guest has not run: the state is spent from here.
	if err := m.spendSaved(uid); err != nil {
		// still whole and valid: quit the QEMU that never ran guest code
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.qmpBound())
		_ = mon.Quit(qctx)
		cancel()
		return false, fmt.Errorf("vm %q: start: remove the saved state before the guest runs on: %w (the state is kept; nothing ran)", name, err)
	}
	if !s.rec.Paused {
		// the caller's ctx may end now (Ctrl-C): the guest runs on, and
		// cont must still reach it
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.qmpBound())
		defer cancel()
		if err := mon.Cont(c); err != nil {
			return true, fmt.Errorf("continue the resumed guest: %w", err)
		}
	}
	return true, nil
}

// resolveMachine names the machine type that name is, or is an alias of;
// "" when this QEMU has none.
func resolveMachine(machines []qmp.MachineInfo, name string) string {
	for _, mi := range machines {
		if mi.Name == name || mi.Alias == name {
			return mi.Name
		}
	}
	return ""
}
