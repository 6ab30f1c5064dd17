//go:build integration

package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/vm"
)

// vm save of the big guest killed at three points. QEMU goes on writing
// the stream it was given after virt died and then waits, paused: vm show
// must say a save was interrupted, and the next command under the VM's
// lock (here vm resume, what a user reaches for) undoes the save — the
// guest runs on from where it was, no stream or record of it left — or
// the save had finished (Saved, QEMU gone) and vm start resumes it.
// Before, the guest stayed paused (postmigrate) with an unrecorded
// saved.state.tmp, and nothing said why.
func realKilledSave(t *testing.T, b *bigVM) {
	tmp := filepath.Join(b.dir(), "saved.state.tmp")
	record := filepath.Join(b.dir(), "saved.json")
	for _, p := range []killPoint{
		b.lockPoint(),
		{"during-state-growing", "saved.state.tmp grown to 64 MiB (QEMU migrating into it)", func(int) bool { return fileSize(tmp) >= 64<<20 }},
		{"after-recorded", "saved.json written (the state recorded, QEMU maybe not yet quit)", func(int) bool { return fileSize(record) > 0 }},
	} {
		t.Run(p.id, func(t *testing.T) {
			b.ensureRunning(t)
			from := len(serialLog(b.root, b.uid))
			runKilled(t, b.root, p, "vm", "save", b.name)
			n := b.lastCounter()
			e := entry(t, b.root, b.name)
			t.Logf("after the kill: %s (%s)", e.Phase, e.Message)
			gcDryRun(t, b.root, "after the kill")
			if e.Phase == vm.PhaseSaved {
				if alive(e.PID) {
					t.Errorf("Saved, but its QEMU pid %d lives", e.PID)
				}
				from = len(serialLog(b.root, b.uid))
				if r := virt(t, nil, "--root", b.root, "vm", "start", b.name); r.code != 0 {
					t.Fatalf("vm start of the saved VM: exit %d: %s", r.code, r.stderr)
				}
				b.wantRunning(t, "after the resume")
				b.wantGoesOn(t, "the resume", from, n)
				b.wantImagesClean(t)
				return
			}
			if e.Phase == vm.PhasePaused && !strings.Contains(e.Message, "vm save was interrupted") {
				t.Errorf("after the kill: Paused, message %q; want it to say a save was interrupted", e.Message)
			}
			if r := virt(t, nil, "--root", b.root, "vm", "resume", b.name); r.code != 0 {
				t.Fatalf("vm resume after the killed save: exit %d: %s", r.code, r.stderr)
			}
			b.wantRunning(t, "after the undone save")
			b.wantGoesOn(t, "after the undone save", from, 0)
			if e := entry(t, b.root, b.name); strings.Contains(e.Message, "interrupted") {
				t.Errorf("after the undo: message %q; want none", e.Message)
			}
			for _, f := range []string{tmp, record, filepath.Join(b.dir(), "saved.state")} {
				if fileExists(f) {
					t.Errorf("%s after the undone save; want it gone (the guest runs on: it is stale)", f)
				}
			}
			b.wantImagesClean(t)
		})
	}
	b.ensureRunning(t)
	b.wantGuestData(t, "after the killed saves")
}
