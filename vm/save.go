package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/qmp"
)

// PhaseSaved is a VM without a process whose RAM and device state is on
// disk (Save): starting it resumes the guest where it was.
const PhaseSaved = "Saved"

// ReasonSaved: the VM's state is saved on disk (Entry.Reason of a Saved VM).
const ReasonSaved = "saved"

// The saved state lives in the VM's state directory: QEMU's migration
// stream, and beside it what it was saved from. Both make the VM Saved:
// the record is written last and removed first, and checked before a
// resume.
const (
	savedStateName  = "saved.state"
	savedRecordName = "saved.json"
	// savedFormat is the record's version: 2 records the machine from the
	// saving QEMU's argv, with its disks and NICs; 1 (still resumed) the
	// spec's machine, firmware, memory and CPUs.
	savedFormat = 2
	// fd names under which QEMU holds the stream's descriptor
	saveFDName   = "virtcon-save"
	resumeFDName = "virtcon-resume"
)

// Save and resume bound what they wait for when the caller's ctx has no
// deadline.
const (
	DefaultSaveTimeout = 10 * time.Minute
	resumeTimeout      = 10 * time.Minute
	migratePoll        = 20 * time.Millisecond
)

// SavedState is the record of a saved state (saved.json): the QEMU and
// the machine the stream belongs to. A stream loads only into the same
// QEMU version with the same machine, memory, CPUs and devices.
type SavedState struct {
	Format      int       `json:"format"`
	SavedAt     time.Time `json:"savedAt"`
	QEMUVersion string    `json:"qemuVersion"` // e.g. 7.2.22
	QEMUPackage string    `json:"qemuPackage"` // e.g. Debian 1:7.2+dfsg-7+deb12u18+b3
	// SavedShape is the machine as the QEMU that saved it was started (its
	// argv; format 1 records hold the spec's machine, firmware, memory and
	// CPUs, and no devices).
	SavedShape
	// MachineType is the machine type QEMU resolved Machine to (q35 runs
	// pc-q35-7.2 on QEMU 7.2); a resume starts QEMU with it. "" when
	// QEMU did not say.
	MachineType string `json:"machineType,omitempty"`
	Accel       string `json:"accel"`
	// Generation is the spec generation the saved guest realises (the
	// VM's status.observedGeneration when it was saved).
	Generation int64 `json:"generation,omitempty"`
	// Paused: the guest was paused when it was saved, and is resumed paused.
	Paused bool   `json:"paused"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ErrSavedState is a saved state that cannot be resumed: the VM does not
// start until it is fixed or thrown away (StartOptions.DiscardSaved).
var ErrSavedState = errors.New("saved state cannot be resumed")

// Why a saved state cannot be resumed (SavedStateError.Reason).
const (
	// SavedCorrupt: the stream or its record is damaged, or QEMU could
	// not load it.
	SavedCorrupt = "corrupt"
	// SavedOtherQEMU: saved by another QEMU version than the one installed.
	SavedOtherQEMU = "other-qemu"
	// SavedSpecChanged: the spec's machine, firmware, memory or CPUs
	// differ from those of the saved guest.
	SavedSpecChanged = "spec-changed"
	// SavedStale: the VM has started since the state was saved, so its
	// disks have moved on from it (a state that should have been removed
	// when the guest ran on).
	SavedStale = "stale"
)

// SavedStateError is a VM whose saved state was not resumed, and why.
// Nothing was started: a guest is never booted fresh in its place unless
// asked (StartOptions.DiscardSaved).
type SavedStateError struct {
	Name   string
	Path   string // the stream
	Reason string // Saved*
	Detail string
}

func (e *SavedStateError) Error() string {
	return fmt.Sprintf("vm %q: %v: %s: %s (%s)", e.Name, ErrSavedState, e.Reason, e.Detail, e.Path)
}

// Is makes errors.Is(err, ErrSavedState) true.
func (e *SavedStateError) Is(target error) bool { return target == ErrSavedState }

func (m *Manager) savedStatePath(uid string) string {
	return filepath.Join(m.layout().VMStateDir(uid), savedStateName)
}

func (m *Manager) savedRecordPath(uid string) string {
	return filepath.Join(m.layout().VMStateDir(uid), savedRecordName)
}

// savedFiles reports which of the saved state's two files exist.
func (m *Manager) savedFiles(uid string) (record, stream bool) {
	_, rerr := os.Lstat(m.savedRecordPath(uid))
	_, serr := os.Lstat(m.savedStatePath(uid))
	return rerr == nil, serr == nil
}

// hasSaved reports whether the VM has a saved state: its record and its
// stream. One without the other is a leftover of an interrupted save or
// removal, never resumed (prepareResume removes it).
func (m *Manager) hasSaved(uid string) bool {
	record, stream := m.savedFiles(uid)
	return record && stream
}

// anySaved reports whether any file of a saved state is there, whole or
// not: what a running VM must be rid of before its guest may run on.
func (m *Manager) anySaved(uid string) bool {
	record, stream := m.savedFiles(uid)
	_, err := os.Lstat(m.savedStatePath(uid) + ".tmp")
	return record || stream || err == nil
}

// SavedRecord returns the record of the VM's saved state; nil without one.
// A record that cannot be read is an error.
func (m *Manager) SavedRecord(ctx context.Context, ref string) (*SavedState, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, err
	}
	if !m.hasSaved(vm.Metadata.UID) {
		return nil, nil
	}
	return m.readSavedRecord(vm)
}

func (m *Manager) readSavedRecord(vm *VirtualMachine) (*SavedState, error) {
	uid := vm.Metadata.UID
	fail := func(format string, a ...any) error {
		return &SavedStateError{Name: vm.Metadata.Name, Path: m.savedStatePath(uid), Reason: SavedCorrupt, Detail: fmt.Sprintf(format, a...)}
	}
	b, err := os.ReadFile(m.savedRecordPath(uid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fail("no record of the save beside it (%s): the save was cut short", savedRecordName)
	}
	if err != nil {
		return nil, fail("record: %v", err)
	}
	var s SavedState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fail("record %s: %v", savedRecordName, err)
	}
	if s.Format < 1 || s.Format > savedFormat {
		return nil, fail("record %s: format %d, want 1 to %d", savedRecordName, s.Format, savedFormat)
	}
	return &s, nil
}

// markSaved makes a VM without a process that has a saved state Saved
// (not MISSING: spec.running stays true so that a start resumes it).
func (m *Manager) markSaved(vm *VirtualMachine, e *Entry) {
	if !m.hasSaved(vm.Metadata.UID) {
		return
	}
	e.Class, e.Phase, e.Reason = ClassManaged, PhaseSaved, ReasonSaved
	e.Message = "RAM and device state saved; a start resumes it"
	if s, err := m.readSavedRecord(vm); err != nil {
		e.Message = "saved state damaged: " + err.Error()
	} else {
		e.Message = fmt.Sprintf("RAM and device state saved at %s; a start resumes it", s.SavedAt.Local().Format(time.DateTime))
	}
}

// removeSaved deletes the saved state, record first: without its record
// a stream is a leftover that no start resumes, so a removal cut short
// anywhere leaves either the whole state or a leftover, never a state
// refused as corrupt. A failure to remove the record (made durable by the
// directory's fsync) leaves the state whole and stops there.
func (m *Manager) removeSaved(uid string) error {
	if err := m.dropSavedRecord(uid); err != nil {
		return err
	}
	return m.removeSavedStream(uid)
}

// spendSaved removes the saved state of a VM whose guest is about to run
// on: the record must go (else the error, and the guest must not run),
// the stream should (a leftover otherwise, removed at the next start).
func (m *Manager) spendSaved(uid string) error {
	if err := m.dropSavedRecord(uid); err != nil {
		return err
	}
	if err := m.removeSavedStream(uid); err != nil {
		m.log.Warn("saved state's stream not removed; the next start removes the leftover", "vm", uid, "err", err)
	}
	return nil
}

// dropSavedRecord removes the record, durably: without it no start
// resumes the stream.
func (m *Manager) dropSavedRecord(uid string) error {
	if err := os.Remove(m.savedRecordPath(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(m.layout().VMStateDir(uid))
}

func (m *Manager) removeSavedStream(uid string) error {
	var errs []error
	for _, p := range []string{m.savedStatePath(uid), m.savedStatePath(uid) + ".tmp"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// syncDir makes the entries of dir (a removal, a rename) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// SaveResult says what a save wrote.
type SaveResult struct {
	Path  string
	Bytes int64
	Took  time.Duration
}

// Save writes the running guest's RAM and device state to a file in the
// VM's state directory and ends its QEMU: the VM becomes Saved, and its
// next start resumes the guest where it was. The guest is paused first
// so that the state is consistent with its disks; QEMU writes the state
// through a descriptor we open and pass it over QMP (no shell, no path
// in QEMU's hands). spec.running stays true.
//
// ctx bounds the save (DefaultSaveTimeout without a deadline). A save
// that fails or runs out of time leaves the guest running as it was,
// with nothing saved.
func (m *Manager) Save(ctx context.Context, ref string) (*SaveResult, error) {
	return m.SaveWith(ctx, ref, SaveOptions{})
}

// SaveOptions tune SaveWith.
type SaveOptions struct {
	// Progress receives what QEMU has written of the state while it saves
	// (seconds per GiB); nil receives nothing.
	Progress OpProgressFunc
}

// SaveWith is Save with options.
func (m *Manager) SaveWith(ctx context.Context, ref string, o SaveOptions) (*SaveResult, error) {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer l.Release()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	pid := m.livePID(uid)
	if pid == 0 {
		return nil, fmt.Errorf("vm %q: save: %w", name, ErrNotRunning)
	}
	if st, _ := m.proc.state(pid); st == "T" {
		return nil, fmt.Errorf("vm %q: save: the QEMU process is stopped by a signal (SIGSTOP)", name)
	}
	if err := m.checkNotHotplugged(name, uid, pid); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultSaveTimeout)
		defer cancel()
	}
	start := time.Now()
	tapNS := m.holdTAPNetns(vm, pid)
	rec, err := m.saveState(ctx, vm, pid, o.Progress)
	if err != nil {
		if tapNS != nil {
			tapNS.Close()
		}
		return nil, fmt.Errorf("vm %q: save: %w", name, err)
	}
	took := time.Since(start)
	// QEMU is gone: the VM's runtime goes, the saved state stays
	m.cleanRuntime(uid)
	m.deleteTAPsIn(ctx, vm, tapNS)
	vm.Spec.Running = true
	vm.Status.Phase, vm.Status.PID = PhaseSaved, 0
	if err := m.store.save(vm); err != nil {
		return nil, err
	}
	m.log.Info("vm saved", "vm", name, "bytes", rec.Size, "took", took)
	return &SaveResult{Path: m.savedStatePath(uid), Bytes: rec.Size, Took: took}, nil
}

// saveState pauses the guest, migrates it into the stream, records it and
// quits QEMU. On failure before the record is written the guest runs on
// as it was (resumed unless it was paused), and no stream is left.
func (m *Manager) saveState(ctx context.Context, vm *VirtualMachine, pid int, progress OpProgressFunc) (_ *SavedState, err error) {
	uid := vm.Metadata.UID
	// The record holds what this QEMU runs, not what the spec says: a
	// change applied to the running VM (virt apply) is not in the stream.
	argv := m.argv(pid)
	if len(argv) == 0 {
		return nil, fmt.Errorf("the command line of QEMU (pid %d) cannot be read", pid)
	}
	dctx, cancel := context.WithTimeout(ctx, m.qmpBound())
	mon, err := m.dialQMP(dctx, uid)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("QMP: %w", err)
	}
	defer func() { mon.Close() }() // the cleanup may have dialled anew
	cmd := func(f func(context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, m.qmpBound())
		defer cancel()
		return f(c)
	}
	var st qmp.StatusInfo
	if err := cmd(func(c context.Context) (err error) { st, err = mon.Status(c); return err }); err != nil {
		return nil, fmt.Errorf("QMP query-status: %w", err)
	}
	paused := st.Status == "paused"
	var machineType string
	if err := cmd(func(c context.Context) (err error) { machineType, err = mon.MachineType(c); return err }); err != nil {
		if mon.Closed() {
			return nil, fmt.Errorf("QMP qom-get /machine type: %w", err)
		}
		m.log.Warn("machine type not known; the record names the machine as QEMU was started", "vm", vm.Metadata.Name, "err", err)
	}
	tmp := m.savedStatePath(uid) + ".tmp"
	migrating := false
	// a virt killed from here on leaves the record: the next session
	// under the VM's lock undoes the save (saveleft.go); it goes when
	// this save has ended either way (after its undo: defers run last
	// first)
	if err := m.recordSaveRun(uid, pid, !paused); err != nil {
		return nil, fmt.Errorf("record the save: %w", err)
	}
	defer os.Remove(m.runPath(uid, saveRunName))
	// From here a failure leaves the guest as it was and no stream. The
	// caller's ctx may be what ended the save (its deadline passed in the
	// middle of the migration), so the cleanup has a deadline of its own,
	// and a monitor of its own if a missed deadline closed this one.
	defer func() {
		if err == nil {
			return
		}
		os.Remove(tmp)
		m.undoSave(ctx, vm, &mon, pid, migrating, !paused)
	}()
	if err := cmd(mon.Stop); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := cmd(func(c context.Context) error { return mon.SendFD(c, saveFDName, f) }); err != nil {
		return nil, fmt.Errorf("pass the state file to QEMU: %w", err)
	}
	// QEMU's default (32 MiB/s) is for a live migration over a shared link
	if err := cmd(func(c context.Context) error { return mon.SetMigrationBandwidth(c, math.MaxInt64/2) }); err != nil {
		return nil, fmt.Errorf("migration bandwidth: %w", err)
	}
	// the record's sha256 is taken while QEMU writes
	th, err := startTailHash(tmp)
	if err != nil {
		return nil, err
	}
	defer th.stop()
	// what QEMU has written is the file's size; the guest's RAM bounds it
	ram := int64(argMemoryMiB(argv)) << 20
	if ram <= 0 {
		ram = int64(vm.Spec.MemoryMiB) << 20
	}
	op := newLongOp(vm.Metadata.Name, "saving state", progress, func() (int64, int64, bool) {
		st, err := f.Stat()
		if err != nil {
			return -1, ram, true
		}
		return st.Size(), ram, true
	})
	defer op.tell(true)
	migrating = true // from the moment migrate may have reached QEMU
	if err := m.execLong(ctx, mon, op, "migrate", map[string]string{"uri": "fd:" + saveFDName}, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	info, err := m.waitMigration(ctx, mon, op, func() bool { return m.proc.gone(pid, uid) })
	if err != nil {
		return nil, err
	}
	if info.Status != qmp.MigrationCompleted {
		return nil, fmt.Errorf("migration %s: %s", info.Status, info.ErrorDesc)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync %s: %w", tmp, err)
	}
	size, sum, err := th.finish()
	if err != nil {
		return nil, err
	}
	v := mon.Greeting().Version
	rec := &SavedState{
		Format: savedFormat, SavedAt: time.Now().UTC(),
		QEMUVersion: v.String(), QEMUPackage: v.Package,
		SavedShape: shapeOf(argv), MachineType: machineType, Accel: argAccel(argv),
		Generation: vm.Status.ObservedGeneration, Paused: paused,
		Size: size, SHA256: sum,
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, m.savedStatePath(uid)); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(m.savedRecordPath(uid), append(b, '\n'), 0o600); err != nil {
		os.Remove(m.savedStatePath(uid))
		return nil, err
	}
	// Saved. QEMU (paused, its state written) goes, even if the caller's
	// deadline has passed meanwhile; should it not, the stream is stale
	// the moment the guest could run again, so it goes with it and the VM
	// is killed rather than left half saved.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveCleanupTimeout)
	defer cancel()
	if mon.Closed() {
		m.log.Warn("QMP closed after the save; killing QEMU", "vm", vm.Metadata.Name)
	} else if err := mon.Quit(qctx); err != nil {
		m.log.Warn("QMP quit after the save failed; killing", "vm", vm.Metadata.Name, "err", err)
	}
	if !m.waitGone(qctx, pid, uid, 10*time.Second) {
		if err := m.killVerified(pid, uid); err != nil {
			m.removeSaved(uid)
			return nil, fmt.Errorf("QEMU did not end after the save: %w", err)
		}
	}
	return rec, nil
}

// saveCleanupTimeout bounds the undoing of a failed save, and the quit
// after a successful one: on their own deadline, not the caller's.
const saveCleanupTimeout = 10 * time.Second

// undoSave lets the guest of a failed save run on as it was: the migration
// (if one was started) cancelled and waited for, and the guest continued
// if it ran before the save (cont). It runs on its own deadline and
// dials a fresh monitor if *mon is closed.
func (m *Manager) undoSave(ctx context.Context, vm *VirtualMachine, mon **qmp.Monitor, pid int, migrating, cont bool) {
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveCleanupTimeout)
	defer cancel()
	open := func() bool {
		if !(*mon).Closed() {
			return true
		}
		(*mon).Close()
		fresh, err := m.dialQMP(c, uid)
		if err != nil {
			m.log.Warn("guest not resumed after a failed save: QMP", "vm", name, "err", err)
			return false
		}
		*mon = fresh
		return true
	}
	if migrating && open() {
		if err := (*mon).MigrateCancel(c); err != nil {
			m.log.Warn("migration not cancelled after a failed save", "vm", name, "err", err)
		}
		// a cancelled migration ends before the guest may run on
		if _, err := m.waitMigration(c, *mon, nil, func() bool { return m.proc.gone(pid, uid) }); err != nil {
			m.log.Warn("cancelled migration did not end", "vm", name, "err", err)
		}
	}
	if cont && open() {
		if err := (*mon).Cont(c); err != nil {
			m.log.Warn("guest not resumed after a failed save", "vm", name, "err", err)
			return
		}
		m.log.Info("guest resumed after a failed save", "vm", name)
	}
}

func (m *Manager) argv(pid int) []string {
	a, _ := m.proc.cmdline(pid)
	return a
}

// waitMigration polls query-migrate until the migration ends, ctx ends,
// or QEMU is gone. Each poll is bounded by ctx (the operation's deadline),
// not by one exchange's: an incoming migration from a file loads in
// QEMU's main loop, which answers only when it is done, and an outgoing
// one's completion may hold it too. op (nil: none) reports meanwhile.
func (m *Manager) waitMigration(ctx context.Context, mon *qmp.Monitor, op *longOp, gone func() bool) (qmp.MigrationInfo, error) {
	for {
		var info qmp.MigrationInfo
		if err := m.execLong(ctx, mon, op, "query-migrate", nil, &info); err != nil {
			if gone() {
				return info, errors.New("QEMU exited")
			}
			return info, fmt.Errorf("query-migrate: %w", err)
		}
		if info.Done() {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return info, fmt.Errorf("migration %s after %w", info.Status, ctx.Err())
		case <-time.After(migratePoll):
		}
		op.tick(m.progressTick())
	}
}

// hashFile returns the size and the sha256 of a file.
func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
