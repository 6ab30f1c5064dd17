package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// resumeFixture is a Saved VM whose start launches a stand-in QEMU (q)
// answering on a scripted monitor: it loads the state (query-migrate says
// completed) and says running. handle, when set, answers first; nil from
// it falls through to the defaults.
type resumeFixture struct {
	m   *Manager
	vm  *VirtualMachine
	q   *fakeQEMU
	mon *fakeMonitor
	dir string
}

func newResumeFixture(t *testing.T, handle func(cmd string, args json.RawMessage) any) *resumeFixture {
	t.Helper()
	m, _, host := newTestManager(t)
	f := &resumeFixture{m: m, vm: savedVM(t, m, "web"), q: spawnStandIn(t, host), dir: shortTempDir(t)}
	fakeQEMUBinary(t, m, f.dir, f.q)
	f.mon = serveMonitor(t, filepath.Join(f.dir, "qmp.sock"), &fakeMonitor{pkg: "test", handle: func(cmd string, args json.RawMessage) any {
		if handle != nil {
			if r := handle(cmd, args); r != nil {
				return r
			}
		}
		switch cmd {
		case "query-migrate":
			return map[string]any{"status": "completed"}
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		}
		return nil
	}})
	return f
}

// savedThere says which of the saved state's files exist.
func (f *resumeFixture) savedThere() (record, stream bool) {
	return f.m.savedFiles(f.vm.Metadata.UID)
}

// A resume removes the saved state (record and stream) before the guest
// may run (cont), never after: once the guest has run, a later start
// loading the state again would corrupt its disks (review of issue 11,
// item 2).
func TestResumeRemovesStateBeforeCont(t *testing.T) {
	t.Parallel()
	var atCont []bool
	var f *resumeFixture
	f = newResumeFixture(t, func(cmd string, _ json.RawMessage) any {
		if cmd == "cont" {
			r, s := f.savedThere()
			atCont = []bool{r, s}
		}
		return nil
	})
	if err := f.m.Start(context.Background(), "web"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got, want := f.mon.gotString(), "getfd,migrate-incoming,query-migrate,cont,query-status"; got != want {
		t.Errorf("QMP commands %s; want %s", got, want)
	}
	if len(atCont) != 2 || atCont[0] || atCont[1] {
		t.Errorf("at cont: record there %v, stream there %v; want both gone", atCont[0], atCont[1])
	}
	back, _ := f.m.store.load(f.vm.Metadata.UID)
	if !f.q.alive() || back.Status.Phase != PhaseRunning || back.Status.PID != f.q.pid {
		t.Errorf("after the resume: alive %v, status %+v; want the QEMU running, recorded", f.q.alive(), back.Status)
	}
}

// A saved state whose record cannot be removed stays whole and the guest
// never runs: no cont, the error, the stand-in ended, the state kept.
func TestResumeRemovalFailsNoCont(t *testing.T) {
	t.Parallel()
	var f *resumeFixture
	f = newResumeFixture(t, func(cmd string, _ json.RawMessage) any {
		if cmd == "migrate-incoming" {
			// the record, read already, cannot be removed now
			rec := f.m.savedRecordPath(f.vm.Metadata.UID)
			b, _ := os.ReadFile(rec)
			os.Remove(rec)
			os.MkdirAll(filepath.Join(rec, "x"), 0o700)
			os.WriteFile(rec+".was", b, 0o600)
		}
		if cmd == "quit" {
			f.q.exit()
			return qmpHangUp{}
		}
		return nil
	})
	err := f.m.Start(context.Background(), "web")
	if err == nil || !strings.Contains(err.Error(), "remove the saved state before the guest runs on") {
		t.Fatalf("Start: got %v; want the removal's failure", err)
	}
	if got := f.mon.gotString(); strings.Contains(got, "cont") {
		t.Errorf("QMP commands %s: the guest was continued although its state could not be removed", got)
	}
	if _, stream := f.savedThere(); !stream {
		t.Error("the stream went although the record could not be removed")
	}
	back, _ := f.m.store.load(f.vm.Metadata.UID)
	if back.Status.PID != 0 || !back.Spec.Running {
		t.Errorf("after the refused resume: status %+v running %v; want no pid recorded, still running (to resume)", back.Status, back.Spec.Running)
	}
	if e, _ := f.m.Peek(context.Background(), "web"); e.Phase == PhaseRunning {
		t.Errorf("after the refused resume: listed %s; want it not running", e.Phase)
	}
}

// After cont nothing kills the guest: an interrupted ctx or a failing
// query-status is reported (or not: the start is done), the VM left
// running and recorded so.
func TestResumeErrorAfterContKeepsGuest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		after   func(cancel func()) any // the answer to cont
		status  any                     // the answer to query-status
		wantErr bool
	}{
		{name: "ctx cancelled after cont", after: func(cancel func()) any { cancel(); return nil }},
		{name: "query-status fails after cont", status: qmpFail{"GenericError", "the monitor broke"}, wantErr: true},
		{name: "cont times out", after: func(func()) any { time.Sleep(qmpTimeout + time.Second); return nil }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := newResumeFixture(t, func(cmd string, _ json.RawMessage) any {
				switch {
				case cmd == "cont" && tt.after != nil:
					return tt.after(cancel)
				case cmd == "query-status" && tt.status != nil:
					return tt.status
				}
				return nil
			})
			err := f.m.Start(ctx, "web")
			if (err != nil) != tt.wantErr {
				t.Errorf("Start: got %v; want an error: %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "resumed and is left as it is") {
				t.Errorf("Start: %q; want it to say the guest is left running", err)
			}
			if !f.q.alive() {
				t.Fatal("the resumed guest's QEMU was killed")
			}
			if r, s := f.savedThere(); r || s {
				t.Errorf("saved state left: record %v, stream %v", r, s)
			}
			back, _ := f.m.store.load(f.vm.Metadata.UID)
			if !back.Spec.Running || back.Status.PID != f.q.pid || back.Status.Phase != PhaseRunning {
				t.Errorf("after the resume: running %v status %+v; want running, pid %d, Running", back.Spec.Running, back.Status, f.q.pid)
			}
		})
	}
}

// A running VM beside a saved state (virt killed between the record and
// QEMU's quit: QEMU paused with a valid state) drops the state before a
// resume or a reboot lets the guest run on; a pause keeps it.
func TestResumeRebootDropSavedState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op        string
		qmp       string
		wantSaved bool
	}{
		{"resume", "cont", false},
		{"reboot", "system_reset", false},
		{"pause", "stop", true},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			t.Parallel()
			m, _, host := newTestManager(t)
			vm := savedVM(t, m, "web")
			uid := vm.Metadata.UID
			startFakeQEMU(t, m, host, uid, nil)
			var at []bool
			serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, _ json.RawMessage) any {
				if cmd == tt.qmp {
					r, s := m.savedFiles(uid)
					at = []bool{r, s}
				}
				return nil
			}})
			op := map[string]func(context.Context, string) error{"resume": m.Resume, "reboot": m.Reboot, "pause": m.Pause}[tt.op]
			if err := op(context.Background(), "web"); err != nil {
				t.Fatalf("%s: %v", tt.op, err)
			}
			if len(at) != 2 || at[0] != tt.wantSaved || at[1] != tt.wantSaved {
				t.Errorf("at %s: record, stream there %v; want %v", tt.qmp, at, tt.wantSaved)
			}
		})
	}
}

// A saved state older than the VM's last start is refused (stale): the
// guest ran on after it, so its disks no longer match it.
func TestPrepareResumeStale(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	vm := savedVM(t, m, "web") // saved at 2026-03-14 09:00 UTC
	for _, tc := range []struct {
		started time.Time
		want    string
	}{
		{time.Date(2026, 3, 14, 8, 0, 0, 0, time.UTC), ""},
		{time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC), SavedStale},
	} {
		vm.Status.StartedAt = &tc.started
		s, err := m.prepareResume(vm, StartOptions{})
		var se *SavedStateError
		switch {
		case tc.want == "" && (err != nil || s == nil):
			t.Errorf("started %v, before the save: got %v, %v; want the state to resume", tc.started, s, err)
		case tc.want != "" && (!errors.As(err, &se) || se.Reason != tc.want):
			t.Errorf("started %v, after the save: got %v; want a SavedStateError (%s)", tc.started, err, tc.want)
		}
	}
	if !m.hasSaved(vm.Metadata.UID) {
		t.Error("the stale state was removed; a refused state is kept")
	}
}

// A QEMU point update (another package string, Debian's revision) loads a
// state of the same version: it resumes, with a warning. Another version
// (major.minor.micro) is refused before anything loads (review of issue
// 11, item 5).
func TestResumeQEMUVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		version [3]int
		pkg     string
		refused bool
	}{
		{"same build", [3]int{7, 2, 22}, "test", false},
		{"another build of the same version", [3]int{7, 2, 22}, "Debian 1:7.2+dfsg-7+deb12u19", false},
		{"another micro version", [3]int{7, 2, 23}, "test", true},
		{"another minor version", [3]int{8, 0, 0}, "test", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newResumeFixture(t, nil)
			f.mon.setVersion(tt.version, tt.pkg)
			err := f.m.Start(context.Background(), "web")
			var se *SavedStateError
			switch {
			case tt.refused && (!errors.As(err, &se) || se.Reason != SavedOtherQEMU):
				t.Fatalf("Start: got %v; want a SavedStateError (other-qemu)", err)
			case !tt.refused && err != nil:
				t.Fatalf("Start: got %v; want the guest resumed", err)
			}
			loaded := strings.Contains(f.mon.gotString(), "migrate-incoming")
			if loaded == tt.refused {
				t.Errorf("QMP commands %s: loaded %v; want %v", f.mon.gotString(), loaded, !tt.refused)
			}
		})
	}
}

// A resume starts QEMU with the machine type the state was saved from
// (pc-q35-7.2, not the alias q35); a spec that names it by its alias
// still matches, one that names another machine does not.
func TestResumeMachineType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		recMachine  string // the saving QEMU's -machine
		specMachine string
		wantChanged bool
	}{
		{"spec and record say q35", "q35", "q35", false},
		{"saved by a resumed QEMU (started with the type)", "pc-q35-7.2", "q35", false},
		{"the spec names the type", "q35", "pc-q35-7.2", false},
		{"the spec names another machine", "pc-q35-7.2", "pc", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newResumeFixture(t, func(cmd string, _ json.RawMessage) any {
				if cmd == "query-machines" {
					return []map[string]any{{"name": "pc-q35-7.2", "alias": "q35"}, {"name": "pc-i440fx-7.2", "alias": "pc"}}
				}
				return nil
			})
			f.vm.Spec.Machine = tt.specMachine
			if err := f.m.store.save(f.vm); err != nil {
				t.Fatal(err)
			}
			writeSaved(t, f.m, f.vm, func(s *SavedState) { s.Machine, s.MachineType = tt.recMachine, "pc-q35-7.2" })
			err := f.m.Start(context.Background(), "web")
			var se *SavedStateError
			if tt.wantChanged {
				if !errors.As(err, &se) || se.Reason != SavedSpecChanged || !strings.Contains(err.Error(), "spec.machine pc (pc-i440fx-7.2), saved with pc-q35-7.2") {
					t.Fatalf("Start: got %v; want spec-changed naming the machine", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if m, _ := argValue(launchedArgv(t, f.dir), "-machine"); m != "pc-q35-7.2" {
				t.Errorf("QEMU started with -machine %s; want the saved type pc-q35-7.2", m)
			}
		})
	}
}
