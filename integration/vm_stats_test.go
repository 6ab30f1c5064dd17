//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// vmStats runs virt vm stats NAME -o json.
func vmStats(t *testing.T, root, name string) vm.Stats {
	t.Helper()
	var st []vm.Stats
	if err := json.Unmarshal([]byte(v(t, root, "vm", "stats", name, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 {
		t.Fatalf("vm stats %s: %d rows; want 1", name, len(st))
	}
	return st[0]
}

// cpuSamples takes n samples and returns the lowest and the highest CPU
// % with the highest's stats: a shared 2-core machine may take a moment
// from any one 250 ms window (or give a background burst to one), so the
// idle guest is judged by its lowest and the busy one by its highest.
func cpuSamples(t *testing.T, root, name string, n int) (lo, hi float64, hiStats vm.Stats) {
	t.Helper()
	lo, hi = 1e9, -1
	for range n {
		st := vmStats(t, root, name)
		if !st.CPUKnown {
			t.Fatalf("vm stats %s: CPU unknown for a running VM: %+v", name, st)
		}
		lo = min(lo, st.CPUPercent)
		if st.CPUPercent > hi {
			hi, hiStats = st.CPUPercent, st
		}
	}
	return lo, hi, hiStats
}

// A busy guest's QEMU shows about one core: idle first, then a busy loop
// on its console (1 vCPU, TCG); its memory and its user-mode NIC
// (unknown: no TAP) are reported as they are.
func TestIntegrationVMStatsBusyGuest(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "st1", g.initrd, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	time.Sleep(time.Second) // the boot's last work (the seed's search) settles
	idle, _, st := cpuSamples(t, root, "st1", 3)
	if st.Phase != vm.PhaseRunning || st.RSSBytes < 16<<20 || st.UID != uid {
		t.Errorf("idle stats %+v: want Running, its UID, RSS of the QEMU (more than 16 MiB)", st)
	}
	if len(st.NICs) != 1 || st.NICs[0].Known {
		t.Errorf("NICs %+v: want one user-mode NIC, unknown", st.NICs)
	}
	consoleType(t, root, "st1", `while :; do :; done & echo BUSY-$((6*7))`, "BUSY-42")
	time.Sleep(500 * time.Millisecond)
	_, busy, st := cpuSamples(t, root, "st1", 8)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("CPU idle %.1f%%, busy %.1f%% (vCPUs %+v; load %s)", idle, busy, st.VCPUs, strings.TrimSpace(string(load)))
	if busy < 80 {
		t.Errorf("busy guest: CPU %.1f%%; want at least 80 (one core)", busy)
	}
	if busy <= idle {
		t.Errorf("busy guest: CPU %.1f%% not above idle %.1f%%", busy, idle)
	}
	if len(st.VCPUs) != 1 || st.VCPUs[0].CPUPercent < 50 {
		t.Errorf("vCPU threads %+v: want one (CPU 0/TCG) carrying the busy loop", st.VCPUs)
	}
}

// virt vm events --follow prints a reboot's RESET and then a guest
// poweroff's SHUTDOWN, in order, with QEMU's timestamps, while another
// reader (as the agent's inventory) holds the events socket; it exits
// when the VM's QEMU does.
func TestIntegrationVMEventsRebootPoweroff(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "ev1", g.initrd, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)

	// the agent's reader, on the events socket, through the same reader
	var (
		mu       sync.Mutex
		agentGot []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agentConnected := make(chan struct{})
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- vm.FollowEvents(ctx, filepath.Join(root, "run/virtcon/vms", uid, "qmp-events.sock"), uid, "ev1",
			vm.FollowOptions{DialFor: 10 * time.Second, Connected: func() { close(agentConnected) }},
			func(e vm.Event) { mu.Lock(); agentGot = append(agentGot, e.Event); mu.Unlock() })
	}()
	select {
	case <-agentConnected:
	case err := <-agentDone:
		t.Fatalf("events socket: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("events socket: not connected in 15s")
	}

	cmd, lines, stderr := followVMEvents(t, root, "ev1", 15*time.Second)
	// a second reader now finds both sockets held
	r := virt(t, nil, "--root", root, "vm", "events", "ev1")
	if r.code == 0 || !strings.Contains(r.stderr, "every QMP event socket of the VM has a reader already") {
		t.Errorf("a third reader: exit %d, stderr %q; want an error saying the sockets are held", r.code, r.stderr)
	}

	v(t, root, "vm", "reboot", "ev1")
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(serialLog(root, uid), "VIRTCON-GUEST-READY") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second READY after the reboot:\n%s", serialLog(root, uid))
		}
		time.Sleep(100 * time.Millisecond)
	}
	consoleSession(root, "ev1", "poweroff -f", "Power down", 20*time.Second)

	var got []vm.Event
	for line := range lines {
		var e vm.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, e)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("virt vm events: %v (it should exit 0 when the VM's QEMU exits); stderr: %s", err, stderr.String())
	}
	var names []string
	reset, shutdown := -1, -1
	for i, e := range got {
		names = append(names, e.Event)
		if e.Name != "ev1" || e.UID != uid || e.At.IsZero() {
			t.Errorf("event %+v: want name ev1, uid %s and QEMU's timestamp", e, uid)
		}
		if i > 0 && e.At.Before(got[i-1].At) {
			t.Errorf("event %d %s at %s before the one ahead of it (%s)", i, e.Event, e.At, got[i-1].At)
		}
		switch {
		case e.Event == "RESET" && reset < 0:
			reset = i
		case e.Event == "SHUTDOWN" && shutdown < 0:
			shutdown = i
			if e.Data["guest"] != true {
				t.Errorf("SHUTDOWN data %v: want guest true (the guest powered off)", e.Data)
			}
		}
	}
	t.Logf("events: %v", names)
	if reset < 0 || shutdown < 0 || reset > shutdown {
		t.Errorf("events %v: want RESET, then SHUTDOWN", names)
	}
	select {
	case err := <-agentDone:
		if err != nil {
			t.Errorf("the other reader: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the other reader did not end with QEMU")
	}
	mu.Lock()
	defer mu.Unlock()
	if a := "," + strings.Join(agentGot, ",") + ","; !strings.Contains(a, ",RESET,") || !strings.Contains(a, ",SHUTDOWN,") || strings.Index(a, ",RESET,") > strings.Index(a, ",SHUTDOWN,") {
		t.Errorf("the other reader got %v; want RESET, then SHUTDOWN too", agentGot)
	}
}

// followVMEvents starts `virt vm events NAME --follow -o json` (bounded at
// 90 s) and waits up to within for it to say it follows; lines are its
// stdout's, closed when it exits, and cmd is to Wait for.
func followVMEvents(t *testing.T, root, name string, within time.Duration) (*exec.Cmd, <-chan string, *testutil.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, virtBin, "--root", root, "vm", "events", name, "--follow", "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for deadline := time.Now().Add(within); !strings.Contains(stderr.String(), "following the events of "+name); {
		if time.Now().After(deadline) {
			t.Fatalf("virt vm events: not following after %s; stderr: %s", within, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cmd, lines, stderr
}
