package agent

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/vm"
)

// stop-vm does what its proto says (issue 21, item 9), through the agent
// and the host's vm.Manager, against a fake QEMU whose guest ignores the
// power button (invRig: a fake /proc entry and QMP sockets): force
// presses the button first and ends QEMU when timeout_ms has run out;
// without force the task fails and QEMU runs on; now (field 4) ends it at
// once, no button. Fails without the fix: the agent took force to skip
// the button (QMP "quit" alone), and a stop without force quit too.
func TestTaskStopVM(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	r := newInvRig(t)
	// the task's host services are built on the host root (taskRunner.env):
	// a copy of a captured host (its checks pass: the VM kinds are run)
	// whose /proc shows the fake QEMU too
	copyTree(t, fakehost.Tree(t, "pvm-build"), r.host)
	h := host.New(host.Options{Layout: r.layout, HostRoot: r.host})
	prepareAgent(t, f, h)
	startRun(t, h, RunOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	requireKind(t, f, KindStopVM)
	uid := r.create("deaf").Metadata.UID

	const grace = 400 * time.Millisecond
	tests := []struct {
		name     string
		stop     *directorv1.StopVM
		commands string // the QMP commands QEMU got, in order (query-status aside: the inventory asks too)
		how      string // the result's stop_how; "" when the task fails
	}{
		{"force: the button, the grace, then quit", &directorv1.StopVM{TimeoutMs: grace.Milliseconds(), Force: true},
			"system_powerdown,quit", vm.StoppedQuit},
		{"no force: the button, the grace, QEMU left running", &directorv1.StopVM{TimeoutMs: grace.Milliseconds()},
			"system_powerdown", ""},
		{"now (with force, as a director sends it): quit, no button", &directorv1.StopVM{Force: true, Now: true},
			"quit", vm.StoppedQuit},
	}
	for i, tt := range tests {
		q := r.start(uid, 94100+i)
		q.mu.Lock()
		q.quitExits = true
		q.mu.Unlock()
		tt.stop.Vm = "deaf"
		id := newID()
		start := time.Now()
		f.sendTask(t, &directorv1.Task{Id: id, DeadlineInMs: 60000, Kind: &directorv1.Task_StopVm{StopVm: tt.stop}})
		st := f.waitTerminal(t, id)
		took := time.Since(start)
		q.mu.Lock()
		var cmds []string
		for _, c := range q.qmp {
			if c != "query-status" {
				cmds = append(cmds, c)
			}
		}
		got := strings.Join(cmds, ",")
		q.mu.Unlock()
		if got != tt.commands {
			t.Errorf("%s: QMP commands %s; want %s", tt.name, got, tt.commands)
		}
		if !tt.stop.GetNow() && took < grace {
			t.Errorf("%s: the task ended after %v; want the grace of %v first", tt.name, took, grace)
		}
		e, err := h.VMs.Peek(context.Background(), uid)
		if err != nil {
			t.Fatal(err)
		}
		if tt.how == "" {
			if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_FAILED || !strings.Contains(st.GetFailure().GetMessage(), "QEMU was left running") {
				t.Errorf("%s: %v; want FAILED saying QEMU was left running", tt.name, st)
			}
			if e.PID != 94100+i {
				t.Errorf("%s: the VM's QEMU is pid %d; want it running on as pid %d", tt.name, e.PID, 94100+i)
			}
		} else {
			if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || st.GetResult().GetVm().GetStopHow() != tt.how {
				t.Errorf("%s: %v; want SUCCEEDED, stop_how %s", tt.name, st, tt.how)
			}
			if e.Phase != vm.PhaseStopped || e.PID != 0 {
				t.Errorf("%s: the VM is %s (pid %d); want Stopped", tt.name, e.Phase, e.PID)
			}
		}
		q.stop()
	}
}

// copyTree copies the tree at src (files, directories, symlinks) into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}
