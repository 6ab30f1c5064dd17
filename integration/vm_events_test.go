//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// virt vm events --follow of a guest whose QEMU is killed -9 (no SHUTDOWN
// event: the stream just ends) says so and exits non-zero; it printed
// nothing and exited 0. The events it printed before (STOP and RESUME of
// a pause and resume) have their times in one width: 6 digits of
// fractional seconds (they had as many as each needed).
func TestIntegrationVMEventsQEMUKilled(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "ek", g.initrd, true)

	cmd, lines, stderr := followVMEvents(t, root, "ek", 30*time.Second)
	// events with QEMU's timestamps, written in one width, then the kill
	for i := 0; i < 3; i++ {
		v(t, root, "vm", "pause", "ek")
		v(t, root, "vm", "resume", "ek")
	}
	atRE := regexp.MustCompile(`"at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"`)
	for seen := 0; seen < 6; seen++ {
		var line string
		select {
		case line = <-lines:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 6 STOP and RESUME events after 30s; stderr: %s", seen, stderr.String())
		}
		var e vm.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.At.IsZero() || e.UID != uid {
			t.Errorf("line %q: %v; want an event of %s with its time", line, err, uid)
		}
		if !atRE.MatchString(line) {
			t.Errorf("line %q: want its time with 6 digits of fractional seconds (%s)", line, atRE)
		}
	}
	pids := qemuPIDsUnder(root)
	if len(pids) != 1 {
		t.Fatalf("QEMU processes under %s: %v; want 1", root, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("virt vm events after QEMU was killed: %v; want exit 1", err)
	}
	if want := fmt.Sprintf(`vm "ek": events: QEMU ended without SHUTDOWN (pid %d: killed, or it crashed)`, pids[0]); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q; want %q", stderr.String(), want)
	}
}
