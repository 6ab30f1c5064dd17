//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// The defects of the review of issue 11's stop and save that need a real
// QEMU.

// Ctrl-C during `virt vm stop` of a guest that ignores the power button
// interrupts the stop: QEMU is neither quit nor killed, the exit code is
// 130 and the message says the guest may still be going down; spec.running
// is false, and a new stop finishes the job.
func TestIntegrationVMStopInterrupted(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "i1", g.deaf, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	pid := entry(t, root, "i1").PID

	cmd := exec.Command(virtBin, "--root", root, "vm", "stop", "i1", "--timeout", "60s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	start := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	t.Logf("interrupted stop: exit %d after %v: %s", code, time.Since(start), stderr.String())
	if code != 130 || !strings.Contains(stderr.String(), "stop interrupted") || !strings.Contains(stderr.String(), "may still be going down") {
		t.Errorf("interrupted stop: exit %d, stderr %q; want 130 and the interruption worded", code, stderr.String())
	}
	if !alive(pid) {
		t.Fatal("the deaf guest's QEMU is gone after an interrupted stop (it was quit or killed)")
	}
	if e := entry(t, root, "i1"); e.Phase != vm.PhaseRunning || e.PID != pid {
		t.Errorf("after the interrupted stop: %s pid %d; want Running pid %d", e.Phase, e.PID, pid)
	}
	var spec vm.VirtualMachine
	if err := json.Unmarshal([]byte(v(t, root, "vm", "show", "i1", "-o", "json")), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Spec.Running {
		t.Error("spec.running is still true after the interrupted stop; the intent is written first")
	}
	v(t, root, "vm", "stop", "i1", "--timeout", "0")
	if alive(pid) {
		t.Error("a new stop did not finish the job")
	}
}

// A save whose --timeout passes in the middle of the migration leaves the
// guest running as it was (the review found it Paused every time, with
// 40, 80 and 160 ms deadlines): nothing saved, the guest not paused.
func TestIntegrationSaveDeadline(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	var e vm.Entry
	out := v(t, root, "vm", "create", "sd1", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "1024", "--cmdline", "console=ttyS0 quiet", "--start", "-o", "json")
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	uid := e.UID
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	// RAM that takes a while to save (zero pages take no room in the
	// stream; these are not zero): even on a fast disk the migration
	// outlasts the longest deadline
	consoleType(t, root, "sd1", "echo x > /f; for i in $(seq 29); do cat /f /f > /g; mv /g /f; done; echo FILLED-$((6*7))", "FILLED-42")
	pid := entry(t, root, "sd1").PID
	state := filepath.Join(root, "var/lib/virtcon/vms", uid)
	for _, d := range []string{"40ms", "80ms", "160ms"} {
		r := virt(t, nil, "--root", root, "vm", "save", "sd1", "--timeout", d)
		t.Logf("save --timeout %s: exit %d in %v: %s", d, r.code, r.elapsed, strings.TrimSpace(r.stderr))
		if r.code == 0 {
			t.Fatalf("save --timeout %s succeeded; the test needs a deadline that passes mid-save", d)
		}
		if e := entry(t, root, "sd1"); e.Phase != vm.PhaseRunning || e.PID != pid {
			t.Errorf("after save --timeout %s ran out: %s pid %d; want Running pid %d (as it was)", d, e.Phase, e.PID, pid)
		}
		ents, _ := os.ReadDir(state)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "saved.") {
				t.Errorf("after save --timeout %s ran out: %s left", d, e.Name())
			}
		}
	}
}
