package vm

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
)

// postmigrateQEMU is a QEMU a killed `vm save` left: the migration done
// (or still active), the guest paused by it.
type postmigrateQEMU struct {
	mu        sync.Mutex
	migration string // query-migrate's status
	status    string // query-status's
	seen      []string
}

func (q *postmigrateQEMU) handle(cmd string, _ json.RawMessage) any {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seen = append(q.seen, cmd)
	switch cmd {
	case "query-migrate":
		return map[string]any{"status": q.migration}
	case "query-status":
		return map[string]any{"status": q.status, "running": q.status == "running"}
	case "migrate_cancel":
		q.migration = "cancelled"
		q.status = "paused"
	case "cont":
		q.status = "running"
	case "stop":
		q.status = "paused"
	}
	return nil
}

func (q *postmigrateQEMU) state() (string, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.status, strings.Join(q.seen, ",")
}

// TestUndoInterruptedSave: the first command under the VM's lock after a
// virt killed in `vm save` lets the guest run on as it did before the
// save (the migration cancelled if QEMU still ran it), and removes the
// unrecorded stream; a guest paused before the save stays paused; a
// session without the lock (vm show) changes nothing. Before, the guest
// stayed paused (postmigrate) with saved.state.tmp, and nothing said why.
func TestUndoInterruptedSave(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		migration, status string
		resume            bool
		otherQEMU         bool // the record names a QEMU since gone (a resume's runs now)
		wantStatus, want  string
	}{
		{name: "migration done", migration: "completed", status: "postmigrate", resume: true, wantStatus: "running", want: "query-migrate,query-status,cont,stop"},
		{name: "migration active", migration: "active", status: "finish-migrate", resume: true, wantStatus: "running", want: "query-migrate,migrate_cancel,query-migrate,query-status,cont,stop"},
		{name: "another QEMU", migration: "completed", status: "postmigrate", resume: true, otherQEMU: true, wantStatus: "paused", want: "stop"},
		{name: "paused before the save", migration: "completed", status: "postmigrate", resume: false, wantStatus: "paused", want: "query-migrate,stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, _, host := newTestManager(t)
			v := mustCreate(t, m, kernelVM("sv", testKernel(t)))
			uid := v.Metadata.UID
			fq := startFakeQEMU(t, m, host, uid, nil)
			q := &postmigrateQEMU{migration: tc.migration, status: tc.status}
			serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: q.handle})
			// the virt that saved is gone (no process has this pid)
			qpid := fq.pid
			if tc.otherQEMU {
				qpid += 1 << 20
			}
			rec, _ := json.Marshal(saveRunRecord{Resume: tc.resume, PID: 1 << 30, QEMUPID: qpid})
			if err := os.WriteFile(m.runPath(uid, saveRunName), rec, 0o600); err != nil {
				t.Fatal(err)
			}
			tmp := m.savedStatePath(uid) + ".tmp"
			if err := os.WriteFile(tmp, []byte("QEVM"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, e, err := m.Get(ctx, "sv")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(e.Message, "vm save was interrupted") && !tc.otherQEMU {
				t.Errorf("vm show message %q; want it to say a save was interrupted", e.Message)
			}
			_, before := q.state()
			if strings.Contains(before, "cont") || strings.Contains(before, "migrate") {
				t.Fatalf("vm show (no lock) sent %s; want nothing undone", before)
			}
			// any command under the lock: a pause
			if err := m.Pause(ctx, "sv"); err != nil {
				t.Fatal(err)
			}
			st, seen := q.state()
			seen = strings.TrimPrefix(strings.TrimPrefix(seen, before), ",")
			if seen != tc.want {
				t.Errorf("QMP: %s; want %s", seen, tc.want)
			}
			if tc.resume && !tc.otherQEMU && !strings.Contains(seen, "cont,stop") {
				t.Errorf("the guest was not continued before the pause's own stop: %s (now %s)", seen, st)
			}
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Errorf("%s after the undo: %v; want it removed", tmp, err)
			}
			if _, err := os.Stat(m.runPath(uid, saveRunName)); !os.IsNotExist(err) {
				t.Errorf("save record after the undo: %v; want it removed", err)
			}
		})
	}
}
