//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// shutdown-guests with three normal guests, a paused one and a deaf one,
// timeout 10s, parallel 4: the normal and paused ones power off by ACPI
// (their consoles say so), the deaf one is quit at the deadline, the whole
// takes about the timeout (not the sum), and the record names exactly the
// five that ran.
func TestIntegrationShutdownGuests(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	kinds := map[string]string{"n1": g.initrd, "n2": g.initrd, "n3": g.initrd, "paused": g.initrd, "deaf": g.deaf}
	uids := map[string]string{}
	for _, name := range []string{"n1", "n2", "n3", "paused", "deaf"} {
		uids[name] = createGuest(t, root, name, kinds[name], true)
	}
	// one that does not run is neither recorded nor touched
	createGuest(t, root, "off", g.initrd, false)
	for _, uid := range uids {
		// READY comes after acpid started (scripts/guest/init)
		waitLog(t, root, uid, "VIRTCON-GUEST-READY", 120*time.Second)
	}
	v(t, root, "vm", "pause", "paused")
	if e := entry(t, root, "paused"); e.Phase != vm.PhasePaused {
		t.Fatalf("paused guest listed as %s", e.Phase)
	}

	r := virt(t, nil, "--root", root, "host", "shutdown-guests", "--timeout", "10", "--parallel", "4", "-o", "json")
	t.Logf("shutdown-guests: %v, exit %d\n%s", r.elapsed, r.code, r.stderr)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rep host.ShutdownReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, r.stdout)
	}
	got := map[string]string{}
	for _, o := range rep.Outcomes {
		got[o.Name] = o.Outcome
		t.Logf("%-7s %-12s %v %s", o.Name, o.Outcome, o.Took, o.Error)
	}
	for name := range kinds {
		want := host.ShutdownPoweredOff
		if name == "deaf" {
			want = host.ShutdownQuit
		}
		if got[name] != want {
			t.Errorf("%s: outcome %q; want %q", name, got[name], want)
		}
		log := serialLog(root, uids[name])
		if powered := strings.Contains(log, "VIRTCON-POWEROFF"); powered != (name != "deaf") {
			t.Errorf("%s: VIRTCON-POWEROFF on its console: %v; want %v", name, powered, name != "deaf")
		}
	}
	if _, ok := got["off"]; ok || len(rep.Outcomes) != 5 {
		t.Errorf("outcomes for %v; want the five that ran", got)
	}
	// about the timeout, not the sum: the deaf one is quit at 10s while
	// the others power off beside it
	if r.elapsed < 10*time.Second || r.elapsed > 16*time.Second {
		t.Errorf("took %v; want about the 10s timeout (the deaf guest's deadline), not a sum of timeouts", r.elapsed)
	}
	if pids := qemuPIDsUnder(root); len(pids) != 0 {
		t.Errorf("QEMU processes left: %v", pids)
	}
	rec, err := host.LoadShutdownRecord(paths.New(root))
	if err != nil || rec == nil {
		t.Fatalf("shutdown record: %v, %v", rec, err)
	}
	var want []string
	for _, uid := range uids {
		want = append(want, uid)
	}
	slices.Sort(want)
	if gotRunning := slices.Sorted(slices.Values(rec.Running)); !slices.Equal(gotRunning, want) {
		t.Errorf("the record names %v; want exactly the five that ran %v", gotRunning, want)
	}
	for name := range kinds {
		if e := entry(t, root, name); e.Phase != vm.PhaseStopped || e.Class != vm.ClassManaged {
			t.Errorf("%s after the shutdown: %s %s; want MANAGED Stopped", name, e.Class, e.Phase)
		}
	}

	// onBoot: restore starts exactly the five that ran (none of them has
	// autostart), not the one that was off
	layout := paths.New(root)
	if err := os.MkdirAll(layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host.PolicyFile(layout), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\nonBoot: restore\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// the reboot empties /run: the shutdown's "shutting down" marker
	// goes with it (a boot in the same boot would start nothing)
	if err := os.Remove(host.ShuttingDownFile(layout)); err != nil {
		t.Fatalf("shutdown-guests left no shutting-down marker: %v", err)
	}
	ns := netns(t)
	b := virtIn(t, ns, "--root", root, "host", "boot", "-o", "json")
	if b.code != 0 {
		t.Fatalf("virt host boot (restore): exit %d\nstderr: %s", b.code, b.stderr)
	}
	var boot host.BootRecord
	if err := json.Unmarshal([]byte(b.stdout), &boot); err != nil {
		t.Fatalf("boot record: %v\n%s", err, b.stdout)
	}
	started := map[string]string{}
	for _, bv := range boot.VMs {
		if bv.Outcome == host.BootStarted {
			started[bv.Name] = bv.Why
		}
	}
	if len(started) != len(kinds) {
		t.Errorf("restore started %v; want exactly %d: the ones that ran", started, len(kinds))
	}
	for name := range kinds {
		if started[name] != host.WhyRestore {
			t.Errorf("%s: started %q by the restore; want %q", name, started[name], host.WhyRestore)
		}
	}
	vms := listVMs(t, root)
	for name, e := range vms {
		if up := e.Phase == vm.PhaseRunning; up != (name != "off") {
			t.Errorf("%s after the restore: %s; want running %v", name, e.Phase, name != "off")
		}
	}
}

// consoleType attaches to the VM's console, types command, waits for want
// in what comes back, and detaches.
func consoleType(t *testing.T, root, name, command, want string) {
	t.Helper()
	if out, _ := consoleSession(root, name, command, want, 30*time.Second); !strings.Contains(out, want) {
		t.Fatalf("console: no %q after %q:\n%s", want, command, out)
	}
}

var counterRE = regexp.MustCompile(`(?m)^C=(\d+)\r?$`)

// counters lists the values the guest's counter printed in log.
func counters(log string) []int {
	var out []int
	for _, m := range counterRE.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// onShutdown: save saves the guest (process gone, phase Saved, spec still
// running); the next virt host boot resumes it and its shell's counter
// goes on where it was, not from 1. A damaged state, or one from another QEMU, is refused
// and nothing starts; --discard-saved boots it fresh.
func TestIntegrationSaveResume(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "s1", g.initrd, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	layout := paths.New(root)
	if err := os.MkdirAll(layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host.PolicyFile(layout), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\nonShutdown: save\nshutdownTimeout: 60s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	consoleType(t, root, "s1", `i=0; while :; do i=$((i+1)); echo C=$i; sleep 1; done &`, "C=3")
	pid := entry(t, root, "s1").PID

	r := virt(t, nil, "--root", root, "host", "shutdown-guests", "-o", "json")
	t.Logf("shutdown-guests (save): %v, exit %d\n%s", r.elapsed, r.code, r.stderr)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rep host.ShutdownReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Outcomes) != 1 || rep.Outcomes[0].Outcome != host.ShutdownSaved || rep.Outcomes[0].SavedBytes == 0 {
		t.Fatalf("outcomes %+v; want s1 saved", rep.Outcomes)
	}
	if alive(pid) || len(qemuPIDsUnder(root)) != 0 {
		t.Fatalf("QEMU still runs after the save")
	}
	if e := entry(t, root, "s1"); e.Phase != vm.PhaseSaved || e.Class != vm.ClassManaged {
		t.Fatalf("after the save: %s %s; want MANAGED Saved", e.Class, e.Phase)
	}
	var spec vm.VirtualMachine
	if err := json.Unmarshal([]byte(v(t, root, "vm", "show", "s1", "-o", "json")), &spec); err != nil {
		t.Fatal(err)
	}
	if !spec.Spec.Running || spec.Status.Phase != vm.PhaseSaved {
		t.Errorf("vm show: spec.running %v, phase %s; want true, Saved", spec.Spec.Running, spec.Status.Phase)
	}
	before := serialLog(root, uid)
	seen := counters(before)
	last := seen[len(seen)-1]
	t.Logf("counter at the save: %d", last)

	time.Sleep(2 * time.Second) // the host's clock runs on; the guest's does not
	// the reboot empties /run, and the shutdown's marker with it
	if err := os.Remove(host.ShuttingDownFile(layout)); err != nil {
		t.Fatalf("shutdown-guests left no shutting-down marker: %v", err)
	}
	// the next boot resumes it (onBoot is autostart, s1 has no autostart:
	// the shutdown that saved it promised the resume)
	r = virtIn(t, netns(t), "--root", root, "host", "boot", "-o", "json")
	if r.code != 0 {
		t.Fatalf("virt host boot (resume): exit %d: %s", r.code, r.stderr)
	}
	t.Logf("boot with the resume: %v", r.elapsed)
	var boot host.BootRecord
	if err := json.Unmarshal([]byte(r.stdout), &boot); err != nil {
		t.Fatal(err)
	}
	if len(boot.VMs) != 1 || boot.VMs[0].Name != "s1" || boot.VMs[0].Outcome != host.BootStarted || boot.VMs[0].Why != host.WhySaved {
		t.Fatalf("boot VMs %+v; want s1 started, why saved", boot.VMs)
	}
	testutil.WaitForText(t, 30*time.Second, 100*time.Millisecond, func() string { return serialLog(root, uid)[len(before):] }, fmt.Sprintf("C=%d", last+2))
	after := counters(serialLog(root, uid)[len(before):])
	if len(after) == 0 || after[0] != last+1 {
		t.Errorf("after the resume the counter printed %v; want it to go on from %d", after, last+1)
	}
	if strings.Contains(serialLog(root, uid)[len(before):], "VIRTCON-GUEST-READY") {
		t.Error("the guest booted afresh instead of resuming")
	}
	if fileExists(filepath.Join(layout.VMStateDir(uid), "saved.state")) {
		t.Error("the saved state is still there after the resume")
	}

	// a damaged state: refused, nothing started, the state kept
	v(t, root, "vm", "save", "s1")
	state := filepath.Join(layout.VMStateDir(uid), "saved.state")
	f, err := os.OpenFile(state, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	f.WriteAt([]byte("virtcon-test-damage"), st.Size()/2)
	f.Close()
	r = virt(t, nil, "--root", root, "vm", "start", "s1")
	if r.code != 1 || !strings.Contains(r.stderr, "saved state cannot be resumed: corrupt") || !strings.Contains(r.stderr, "--discard-saved") {
		t.Errorf("start of a damaged state: exit %d, %q; want 1, refused with the --discard-saved hint", r.code, r.stderr)
	}
	if pids := qemuPIDsUnder(root); len(pids) != 0 || !fileExists(state) {
		t.Errorf("after the refusal: QEMU %v, state there %v; want none started, the state kept", pids, fileExists(state))
	}
	if e := entry(t, root, "s1"); e.Phase != vm.PhaseSaved {
		t.Errorf("after the refusal: %s; want Saved", e.Phase)
	}

	// --discard-saved boots it fresh
	boots := strings.Count(serialLog(root, uid), "VIRTCON-GUEST-READY")
	v(t, root, "vm", "start", "s1", "--discard-saved")
	waitFor(t, 90*time.Second, func() bool { return strings.Count(serialLog(root, uid), "VIRTCON-GUEST-READY") > boots })
	if fileExists(state) {
		t.Error("--discard-saved left the state")
	}

	// a state from another QEMU: QEMU is started, asked its version, and
	// stopped again; the state stays
	v(t, root, "vm", "save", "s1")
	recPath := filepath.Join(layout.VMStateDir(uid), "saved.json")
	b, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	json.Unmarshal(b, &rec)
	rec["qemuVersion"] = "6.2.0"
	b, _ = json.Marshal(rec)
	os.WriteFile(recPath, b, 0o600)
	r = virt(t, nil, "--root", root, "vm", "start", "s1")
	if r.code != 1 || !strings.Contains(r.stderr, "other-qemu") || !strings.Contains(r.stderr, "saved by QEMU 6.2.0") {
		t.Errorf("start of another QEMU's state: exit %d, %q; want 1, other-qemu", r.code, r.stderr)
	}
	if pids := qemuPIDsUnder(root); len(pids) != 0 || !fileExists(state) {
		t.Errorf("after the refusal: QEMU %v, state there %v; want none left, the state kept", pids, fileExists(state))
	}
}

func waitFor(t *testing.T, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not so after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
