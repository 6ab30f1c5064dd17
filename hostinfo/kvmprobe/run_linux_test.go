package kvmprobe

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startHangingProbe runs the hanging helper through Run and returns the
// result, how long Run took and the pids the helper started.
func startHangingProbe(t *testing.T, ctx context.Context, mode string, timeout time.Duration) (Result, time.Duration, [2]int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pids")
	t.Setenv(testHangEnv, mode)
	t.Setenv(testPIDFileEnv, pidFile)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := Run(ctx, Options{Device: "/dev/test-hang", Timeout: timeout, Exe: exe})
	took := time.Since(start)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("helper wrote no pid file (result %+v): %v", r, err)
	}
	var pids [2]int
	for i, f := range strings.Fields(string(b)) {
		if pids[i], err = strconv.Atoi(f); err != nil || i > 1 {
			t.Fatalf("bad pid file %q", b)
		}
	}
	return r, took, pids
}

// gone: the process does not exist (or, for one we did not start, is a
// zombie waiting for an init that may not reap promptly in a container).
func gone(pid int, zombieOK bool) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...; comm may contain spaces and parentheses
	i := strings.LastIndexByte(string(stat), ')')
	return zombieOK && i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func assertKilled(t *testing.T, pids [2]int) {
	t.Helper()
	if !gone(pids[0], false) {
		t.Errorf("probe child %d still exists (alive or unreaped zombie)", pids[0])
	}
	if pids[1] == 0 {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for !gone(pids[1], true) {
		if time.Now().After(deadline) {
			t.Errorf("grandchild %d in the probe's process group survived", pids[1])
			_ = syscall.Kill(pids[1], syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunHardDeadline(t *testing.T) {
	const timeout = time.Second
	r, took, pids := startHangingProbe(t, context.Background(), "1", timeout)
	if took < timeout || took > timeout+time.Second {
		t.Errorf("Run took %v; want within [%v, %v]", took, timeout, timeout+time.Second)
	}
	if !r.TimedOut || r.Stage != StageRunIO || r.APIVersion != 12 || r.Device != "/dev/test-hang" {
		t.Errorf("Run = %+v; want TimedOut in stage %q with the progress the child reported", r, StageRunIO)
	}
	if r.ElapsedNanos < timeout.Nanoseconds() || !strings.Contains(r.Error, "timed out") {
		t.Errorf("ElapsedNanos %d, Error %q", r.ElapsedNanos, r.Error)
	}
	if ok, reason := r.Verdict(); ok || !strings.Contains(reason, "timed out") {
		t.Errorf("Verdict = %v, %q", ok, reason)
	}
	assertKilled(t, pids)
}

func TestRunCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel)
	r, took, pids := startHangingProbe(t, ctx, "1", time.Minute)
	if took > 2*time.Second {
		t.Errorf("Run took %v after cancellation at 700ms", took)
	}
	if !r.TimedOut || !strings.Contains(r.Error, "cancelled") || r.Stage != StageRunIO {
		t.Errorf("Run = %+v; want TimedOut and a cancellation error", r)
	}
	assertKilled(t, pids)
}

// A child that delivers its result but does not exit is not waited for.
func TestRunResultThenHang(t *testing.T) {
	r, took, pids := startHangingProbe(t, context.Background(), "after-result", 5*time.Second)
	if took > time.Second {
		t.Errorf("Run took %v; the result was in at once", took)
	}
	if r.TimedOut || r.Error != "" || r.Stage != StageDone || r.ElapsedNanos <= 0 {
		t.Errorf("Run = %+v; want the child's result", r)
	}
	assertKilled(t, pids)
}

// The real probe against the real device. Only consistency is asserted
// here; the machine-specific verdict is in kvmprobe_integration_test.go.
func TestRunLive(t *testing.T) {
	f, err := os.OpenFile(DefaultDevice, os.O_RDWR, 0)
	if err != nil {
		t.Skipf("%s not usable here: %v", DefaultDevice, err)
	}
	_ = f.Close()
	const timeout = 3 * time.Second
	start := time.Now()
	r := Run(context.Background(), Options{Timeout: timeout})
	took := time.Since(start)
	b, _ := json.Marshal(r)
	ok, reason := r.Verdict()
	t.Logf("took %v\nresult %s\nverdict ok=%v: %s", took.Round(time.Millisecond), b, ok, reason)

	if took > timeout+1500*time.Millisecond {
		t.Errorf("Run took %v, beyond the %v deadline", took, timeout)
	}
	if r.Stage == "" {
		t.Error("no stage reported")
	}
	if r.Stage == StageDone {
		if !r.IOExitOK || !r.HaltOK || r.LoopIterations == 0 || r.LoopNanos <= 0 || r.ItersPerSec <= 0 || r.Error != "" || r.TimedOut {
			t.Errorf("stage done but inconsistent: %+v", r)
		}
	} else if r.Error == "" {
		t.Errorf("stage %q without an error: %+v", r.Stage, r)
	}
	if r.HaltOK && !r.IOExitOK {
		t.Error("HaltOK without IOExitOK")
	}
	if r.APIVersion != 0 && r.APIVersion != 12 && r.Error == "" {
		t.Errorf("API version %d accepted", r.APIVersion)
	}
	if ok && (r.ItersPerSec < MinItersPerSec || r.Stage != StageDone) {
		t.Errorf("Verdict ok for %+v", r)
	}
}
