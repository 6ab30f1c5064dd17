package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeSaved gives vm a saved state as Save leaves it: a stream and, unless
// edit says otherwise, its record.
func writeSaved(t *testing.T, m *Manager, vm *VirtualMachine, edit func(*SavedState)) {
	t.Helper()
	uid := vm.Metadata.UID
	stream := []byte("QEVM\x00\x00\x00\x03 a guest's RAM and devices")
	if err := os.WriteFile(m.savedStatePath(uid), stream, 0o600); err != nil {
		t.Fatal(err)
	}
	size, sum, err := hashFile(m.savedStatePath(uid))
	if err != nil {
		t.Fatal(err)
	}
	// saved by the QEMU the spec makes (as if started from it)
	launch, err := m.launchFor(vm, "tcg")
	if err != nil {
		t.Fatal(err)
	}
	rec := SavedState{Format: savedFormat, SavedAt: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC),
		QEMUVersion: "7.2.22", QEMUPackage: "test", SavedShape: shapeOf(launch.Args()),
		Accel: "tcg", Generation: vm.Metadata.Generation, Size: size, SHA256: sum}
	if edit != nil {
		edit(&rec)
	}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(m.savedRecordPath(uid), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// savedVM is a VM that Save left: spec.running, no process, a saved state.
func savedVM(t *testing.T, m *Manager, name string) *VirtualMachine {
	t.Helper()
	vm := mustCreate(t, m, kernelVM(name, testKernel(t)))
	vm.Spec.Running = true
	if err := m.store.save(vm); err != nil {
		t.Fatal(err)
	}
	writeSaved(t, m, vm, nil)
	return vm
}

func TestSavedPhase(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	savedVM(t, m, "saved")
	missing := mustCreate(t, m, kernelVM("missing", testKernel(t)))
	missing.Spec.Running = true
	if err := m.store.save(missing); err != nil {
		t.Fatal(err)
	}
	entries, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	if e := got["saved"]; e.Class != ClassManaged || e.Phase != PhaseSaved || e.Reason != ReasonSaved || e.Running() {
		t.Errorf("saved VM: got class %s phase %s reason %q running %v; want MANAGED Saved saved, not running", e.Class, e.Phase, e.Reason, e.Running())
	}
	if e := got["missing"]; e.Class != ClassMissing || e.Phase != PhaseStopped {
		t.Errorf("VM without a saved state: got %s %s; want MISSING Stopped (a saved state is what makes a VM Saved)", e.Class, e.Phase)
	}
	v, e, err := m.Get(ctx, "saved")
	if err != nil || v.Status.Phase != PhaseSaved || e.Phase != PhaseSaved {
		t.Errorf("Get: got phase %v / %v (%v); want Saved", v.Status.Phase, e.Phase, err)
	}
	if p, err := m.Peek(ctx, "saved"); err != nil || p.Phase != PhaseSaved {
		t.Errorf("Peek: got %+v (%v); want Saved", p, err)
	}
	rec, err := m.SavedRecord(ctx, "saved")
	if err != nil || rec == nil || rec.QEMUVersion != "7.2.22" {
		t.Errorf("SavedRecord: got %+v, %v; want the record", rec, err)
	}
	if rec, err := m.SavedRecord(ctx, "missing"); rec != nil || err != nil {
		t.Errorf("SavedRecord of a VM without one: got %+v, %v; want nil, nil", rec, err)
	}
}

func TestPrepareResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   func(t *testing.T, m *Manager, vm *VirtualMachine)
		discard bool
		// wantReason "" wants a state to resume (or none: wantNone)
		wantReason string
		wantNone   bool
	}{
		{name: "nothing saved", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {}, wantNone: true},
		{name: "a save cut short leaves only its temporary file", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			os.WriteFile(m.savedStatePath(vm.Metadata.UID)+".tmp", []byte("QEVM half"), 0o600)
		}, wantNone: true},
		{name: "whole", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) { writeSaved(t, m, vm, nil) }},
		{name: "discarded on request", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, func(s *SavedState) { s.SHA256 = "bad" })
		}, discard: true, wantNone: true},
		// a removal cut short after the record (or a save cut short
		// before it): a leftover, removed, and the guest boots fresh
		{name: "stream without its record", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, nil)
			os.Remove(m.savedRecordPath(vm.Metadata.UID))
		}, wantNone: true},
		// an older virt's removal cut short (it removed the stream first)
		{name: "record without its stream", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, nil)
			os.Remove(m.savedStatePath(vm.Metadata.UID))
		}, wantNone: true},
		{name: "record unreadable", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, nil)
			os.WriteFile(m.savedRecordPath(vm.Metadata.UID), []byte("{not json"), 0o600)
		}, wantReason: SavedCorrupt},
		{name: "record of another format", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, func(s *SavedState) { s.Format = savedFormat + 1 })
		}, wantReason: SavedCorrupt},
		{name: "stream cut short", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, nil)
			os.Truncate(m.savedStatePath(vm.Metadata.UID), 8)
		}, wantReason: SavedCorrupt},
		{name: "a byte changed", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, nil)
			f, _ := os.OpenFile(m.savedStatePath(vm.Metadata.UID), os.O_WRONLY, 0)
			f.WriteAt([]byte("X"), 12)
			f.Close()
		}, wantReason: SavedCorrupt},
		{name: "memory changed since", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, func(s *SavedState) { s.MemoryMiB = vm.Spec.MemoryMiB * 2 })
		}, wantReason: SavedSpecChanged},
		{name: "machine changed since", setup: func(t *testing.T, m *Manager, vm *VirtualMachine) {
			writeSaved(t, m, vm, func(s *SavedState) { s.Machine = "pc" })
		}, wantReason: SavedSpecChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _, _ := newTestManager(t)
			vm := mustCreate(t, m, kernelVM("web", testKernel(t)))
			tt.setup(t, m, vm)
			s, err := m.prepareResume(vm, StartOptions{DiscardSaved: tt.discard})
			var se *SavedStateError
			switch {
			case tt.wantReason != "":
				if !errors.As(err, &se) || se.Reason != tt.wantReason || !errors.Is(err, ErrSavedState) {
					t.Fatalf("got %v, %v; want a SavedStateError (%s)", s, err, tt.wantReason)
				}
				// refused states stay for the operator to look at or discard
				if !m.hasSaved(vm.Metadata.UID) {
					t.Errorf("the refused stream was removed")
				}
			case tt.wantNone:
				if s != nil || err != nil {
					t.Fatalf("got %+v, %v; want nothing to resume", s, err)
				}
				if m.hasSaved(vm.Metadata.UID) || fileThere(m.savedRecordPath(vm.Metadata.UID)) || fileThere(m.savedStatePath(vm.Metadata.UID)+".tmp") {
					t.Errorf("saved files left: %v", dirEntries(t, m.layout().VMStateDir(vm.Metadata.UID)))
				}
			default:
				if err != nil || s == nil || s.rec.Accel != "tcg" {
					t.Fatalf("got %+v, %v; want the state to resume", s, err)
				}
			}
		})
	}
}

func fileThere(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A VM whose saved state cannot be resumed does not start, fresh or
// otherwise, and keeps the state; --discard-saved throws it away.
func TestStartRefusesDamagedSavedState(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	vm := savedVM(t, m, "web")
	uid := vm.Metadata.UID
	f, _ := os.OpenFile(m.savedStatePath(uid), os.O_WRONLY, 0)
	f.WriteAt([]byte("X"), 12)
	f.Close()

	err := m.Start(ctx, "web")
	var se *SavedStateError
	if !errors.As(err, &se) || se.Reason != SavedCorrupt || se.Name != "web" {
		t.Fatalf("Start: got %v; want a SavedStateError (corrupt) for web", err)
	}
	if !m.hasSaved(uid) || !fileThere(m.savedRecordPath(uid)) {
		t.Errorf("the refused state is gone")
	}
	if ents := dirEntries(t, m.layout().VMRunDir(uid)); len(ents) != 0 {
		t.Errorf("a refused start left runtime files: %v", ents)
	}
	if e, _ := m.Peek(ctx, "web"); e.Phase != PhaseSaved {
		t.Errorf("after the refused start: phase %s; want Saved", e.Phase)
	}

	// discarding gets past the state (here to the QEMU that does not exist)
	err = m.StartWith(ctx, "web", StartOptions{DiscardSaved: true})
	if err == nil || errors.Is(err, ErrSavedState) {
		t.Fatalf("StartWith(DiscardSaved): got %v; want the start to go on to QEMU (missing here)", err)
	}
	if m.hasSaved(uid) || fileThere(m.savedRecordPath(uid)) {
		t.Errorf("DiscardSaved left the saved state")
	}
}

// Stopping a Saved VM only changes its desired state: the saved state
// stays (a later start resumes it).
func TestStopKeepsSavedState(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	vm := savedVM(t, m, "web")
	res, err := m.PowerOff(ctx, "web", StopOptions{})
	if err != nil || res.How != StoppedNotRunning {
		t.Fatalf("PowerOff: got %+v, %v; want not-running", res, err)
	}
	back, err := m.store.load(vm.Metadata.UID)
	if err != nil || back.Spec.Running || back.Status.Phase != PhaseSaved {
		t.Errorf("after stop: running %v phase %q (%v); want false, Saved", back.Spec.Running, back.Status.Phase, err)
	}
	if !m.hasSaved(vm.Metadata.UID) {
		t.Errorf("stop removed the saved state")
	}
	if e, _ := m.Peek(ctx, "web"); e.Phase != PhaseSaved || e.Class != ClassManaged {
		t.Errorf("listed as %s %s; want MANAGED Saved", e.Class, e.Phase)
	}
}

func TestSaveNotRunning(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	mustCreate(t, m, kernelVM("web", testKernel(t)))
	if _, err := m.Save(context.Background(), "web"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Save of a stopped VM: got %v; want ErrNotRunning", err)
	}
}

// A removal deletes the record first: should it fail there, the state is
// whole (a later start resumes it), never a stream without its record or
// a record without its stream (review of issue 11, item 6).
func TestRemoveSavedRecordFirst(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	vm := savedVM(t, m, "web")
	uid := vm.Metadata.UID
	// a record that cannot be removed: a directory with something in it
	rec := m.savedRecordPath(uid)
	os.Remove(rec)
	if err := os.MkdirAll(filepath.Join(rec, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.removeSaved(uid); err == nil {
		t.Fatal("removeSaved: got nil; want the record's removal to fail")
	}
	if !fileThere(m.savedStatePath(uid)) {
		t.Error("the stream went although its record could not be removed")
	}
	os.RemoveAll(rec)
	writeSaved(t, m, vm, nil)
	if err := m.removeSaved(uid); err != nil {
		t.Fatal(err)
	}
	if ents := dirEntries(t, m.layout().VMStateDir(uid)); slices.Contains(ents, savedStateName) || slices.Contains(ents, savedRecordName) {
		t.Errorf("after removeSaved: %v", ents)
	}
}

// One file of a saved state without the other is no saved state: the VM
// is not listed Saved (it is MISSING: a start boots it fresh).
func TestSavedLeftoverNotSaved(t *testing.T) {
	t.Parallel()
	for _, gone := range []string{savedRecordName, savedStateName} {
		t.Run("without "+gone, func(t *testing.T) {
			t.Parallel()
			m, _, _ := newTestManager(t)
			vm := savedVM(t, m, "web")
			os.Remove(filepath.Join(m.layout().VMStateDir(vm.Metadata.UID), gone))
			e, err := m.Peek(context.Background(), "web")
			if err != nil || e.Phase == PhaseSaved || e.Class != ClassMissing {
				t.Errorf("Peek: got %s %s (%v); want MISSING, not Saved", e.Class, e.Phase, err)
			}
			if rec, err := m.SavedRecord(context.Background(), "web"); rec != nil || err != nil {
				t.Errorf("SavedRecord: got %+v, %v; want nil, nil", rec, err)
			}
		})
	}
}

// A save whose deadline passes in the middle of the migration leaves the
// guest running as it was: the migration is cancelled and the guest
// continued on a deadline of the cleanup's own (the caller's has passed),
// over a freshly dialled monitor when the missed deadline closed the old
// one; no stream is left (review of issue 11, item 3).
func TestSaveDeadlineResumesGuest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// how long a query-migrate takes to answer while active
		slow time.Duration
	}{
		{name: "deadline between two polls"},
		{name: "deadline while a poll is in flight (the monitor closes)", slow: 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _, host := newTestManager(t)
			vm := mustCreate(t, m, kernelVM("web", testKernel(t)))
			uid := vm.Metadata.UID
			q := startFakeQEMU(t, m, host, uid, nil)
			var mu sync.Mutex
			state := "running"
			migration := "none"
			mon := serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, _ json.RawMessage) any {
				mu.Lock()
				defer mu.Unlock()
				switch cmd {
				case "query-status":
					return map[string]any{"status": state, "running": state == "running"}
				case "stop":
					state = "paused"
				case "cont":
					state = "running"
				case "migrate":
					migration = "active"
				case "migrate_cancel":
					migration = "cancelled"
				case "query-migrate":
					if migration == "active" && tt.slow > 0 {
						mu.Unlock()
						time.Sleep(tt.slow)
						mu.Lock()
					}
					return map[string]any{"status": migration}
				}
				return nil
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			res, err := m.Save(ctx, "web")
			if err == nil {
				t.Fatalf("Save: got %+v; want the deadline's error", res)
			}
			mu.Lock()
			gotState, gotMigration := state, migration
			mu.Unlock()
			if gotState != "running" || gotMigration != "cancelled" {
				got := mon.got()
				t.Errorf("after the failed save: guest %s, migration %s; want running, cancelled (%d QMP commands, the last: %v)", gotState, gotMigration, len(got), got[max(0, len(got)-4):])
			}
			if !q.alive() {
				t.Error("the QEMU of a failed save was killed")
			}
			if ents := dirEntries(t, m.layout().VMStateDir(uid)); slices.ContainsFunc(ents, func(e string) bool { return strings.HasPrefix(e, "saved.") }) {
				t.Errorf("a failed save left %v", ents)
			}
		})
	}
}
