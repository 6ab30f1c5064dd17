package kvmprobe

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/internal/testutil"
)

// Test helper modes of this test binary, selected by environment.
const (
	testHangEnv    = "VIRTCON_KVM_PROBE_TEST_HANG"    // "1": a probe child that hangs; "grandchild": its child; "after-result": hangs after its result
	testPIDFileEnv = "VIRTCON_KVM_PROBE_TEST_PIDFILE" // where the hanging child writes "<pid> <grandchild pid>"
)

func TestMain(m *testing.M) {
	// The hang modes stand in for the probe's child, so they come first.
	switch os.Getenv(testHangEnv) {
	case "1":
		hangingChild()
	case "grandchild":
		sleepForever()
	case "after-result":
		resultThenHang()
	}
	reexec.Init()
	os.Exit(m.Run())
}

// hangingChild stands in for a probe stuck in KVM_RUN: it reports a stage,
// starts a grandchild in its process group, then never finishes.
func hangingChild() {
	gc := exec.Command(os.Args[0])
	gc.Env = append(os.Environ(), testHangEnv+"=grandchild")
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting grandchild:", err)
		os.Exit(3)
	}
	pids := fmt.Sprintf("%d %d", os.Getpid(), gc.Process.Pid)
	if err := os.WriteFile(os.Getenv(testPIDFileEnv), []byte(pids), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "writing pid file:", err)
		os.Exit(3)
	}
	emitProgress(Result{Device: os.Getenv(ChildEnv), APIVersion: 12, Stage: StageRunIO})
	fmt.Fprintln(os.Stderr, "hanging now")
	sleepForever()
}

// resultThenHang delivers a complete result, then never exits.
func resultThenHang() {
	pids := fmt.Sprintf("%d 0", os.Getpid())
	if err := os.WriteFile(os.Getenv(testPIDFileEnv), []byte(pids), 0o600); err != nil {
		os.Exit(3)
	}
	_ = json.NewEncoder(os.Stdout).Encode(Result{Device: os.Getenv(ChildEnv), Stage: StageDone, IOExitOK: true, HaltOK: true,
		LoopIterations: 1, LoopNanos: 1, ItersPerSec: 1e9})
	_ = os.Stdout.Close()
	sleepForever()
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func TestVerdict(t *testing.T) {
	fast := Result{Device: "/dev/kvm", APIVersion: 12, Stage: StageDone, IOExitOK: true, HaltOK: true,
		LoopIterations: 100_000_000, LoopNanos: 30_000_000, ItersPerSec: 100_000_000 / 0.03, ElapsedNanos: 40_000_000}
	with := func(f func(*Result)) Result { r := fast; f(&r); return r }
	tests := []struct {
		name   string
		r      Result
		ok     bool
		reason string // substring
	}{
		{"fast", fast, true, "3.33G iter/s"},
		{"at threshold", with(func(r *Result) { r.ItersPerSec = MinItersPerSec }), true, "100.0M iter/s"},
		{"slow", with(func(r *Result) { r.LoopNanos, r.ItersPerSec = 30_000_000_000, 3.3e6 }), false, "below the hardware-like minimum"},
		{"timed out", with(func(r *Result) {
			r.Stage, r.TimedOut, r.HaltOK, r.LoopIterations, r.ItersPerSec = StageLoop, true, true, 0, 0
			r.Error = "kvm probe timed out"
		}), false, `timed out after 40ms in stage "loop"`},
		{"slow loop stopped", with(func(r *Result) {
			r.Stage, r.LoopIterations, r.LoopNanos, r.ItersPerSec = StageLoop, 2_000_000, 1_800_000_000, 1.1e6
			r.Error = "timed loop unfinished after 1.8s in KVM_RUN"
		}), false, "1.1M iter/s, far below"},
		{"error", Result{Stage: StageCreateVCPU, Error: "KVM_CREATE_VCPU: operation not permitted"}, false,
			`failed in stage "create-vcpu": KVM_CREATE_VCPU: operation not permitted`},
		{"no io exit", with(func(r *Result) { r.IOExitOK = false }), false, "expected I/O exit"},
		{"no halt", with(func(r *Result) { r.HaltOK = false }), false, "HLT"},
		{"loop not run", with(func(r *Result) { r.Stage, r.LoopIterations, r.LoopNanos, r.ItersPerSec = StageLoop, 0, 0, 0 }), false, "did not complete"},
		{"zero value", Result{}, false, "I/O exit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := tc.r.Verdict()
			if ok != tc.ok || !strings.Contains(reason, tc.reason) {
				t.Errorf("Verdict() = %v, %q; want %v and a reason containing %q", ok, reason, tc.ok, tc.reason)
			}
			if strings.Contains(reason, "\n") {
				t.Errorf("reason is not one line: %q", reason)
			}
		})
	}
}

func TestResultJSON(t *testing.T) {
	in := Result{Device: "/dev/kvm", APIVersion: 12, Extensions: map[string]bool{"KVM_CAP_USER_MEMORY": true},
		MaxVCPUs: 1024, Stage: StageDone, IOExitOK: true, HaltOK: true, LoopIterations: 7, LoopNanos: 9,
		ItersPerSec: 7e9 / 9, ElapsedNanos: 11}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"apiVersion":12`, `"ioExitOK":true`, `"loopIterations":7`, `"maxVCPUs":1024`, `"timedOut":false`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON %s lacks %s", b, key)
		}
	}
	var out Result
	if err := json.Unmarshal(b, &out); err != nil || out.Stage != in.Stage || !out.Extensions["KVM_CAP_USER_MEMORY"] {
		t.Errorf("round trip: %+v, %v", out, err)
	}
}

// The real child, probing a device that does not exist: the whole round
// trip works without KVM.
func TestRunMissingDevice(t *testing.T) {
	r := Run(context.Background(), Options{Device: "/nonexistent/kvm", Timeout: 10 * time.Second})
	if r.TimedOut || r.Stage != StageOpen || r.Error == "" || r.ElapsedNanos <= 0 || r.Device != "/nonexistent/kvm" {
		t.Fatalf("Run = %+v; want a prompt open failure", r)
	}
	if !strings.Contains(r.Error, "/nonexistent/kvm") {
		t.Errorf("error %q does not name the device", r.Error)
	}
	if ok, _ := r.Verdict(); ok {
		t.Error("Verdict ok for a missing device")
	}
}

func TestRunChildWithoutResult(t *testing.T) {
	exe := testutil.RequireCommand(t, "true", "apt-get install coreutils")
	r := Run(context.Background(), Options{Exe: exe, Timeout: 10 * time.Second})
	if r.TimedOut || !strings.Contains(r.Error, "no result") {
		t.Fatalf("Run = %+v; want a 'no result' error", r)
	}
}

func TestRunBadExe(t *testing.T) {
	r := Run(context.Background(), Options{Exe: "/nonexistent/probe-exe"})
	if r.TimedOut || !strings.Contains(r.Error, "starting child") {
		t.Fatalf("Run = %+v; want a start error", r)
	}
}

func TestRunContextAlreadyDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := Run(ctx, Options{})
	if r.Error == "" {
		t.Fatalf("Run with a cancelled context = %+v; want an error", r)
	}
}
