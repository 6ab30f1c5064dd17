//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
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
