//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// realShutdownTimeout is the policy's shutdownTimeout for the 4 guests.
const realShutdownTimeout = 120 * time.Second

// virt host shutdown-guests with the save policy saves four 1 GiB guests
// at once within the shutdown timeout (one with 768 MiB of dirty RAM and
// 1 GiB of disk data, three with 192 MiB dirty: four times 768 MiB takes
// longer under TCG on 2 cores than the tier's time allows), and the next
// virt host boot resumes each where it was.
func TestIntegrationRealSizeShutdown(t *testing.T) {
	root := vmRoot(t)
	layout := paths.New(root)
	if err := os.MkdirAll(layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf("apiVersion: virtcon/v1\nkind: HostPolicy\nonShutdown: save\nshutdownTimeout: %ds\nparallelShutdown: 4\n", int(realShutdownTimeout.Seconds()))
	if err := os.WriteFile(host.PolicyFile(layout), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	// all four boot at once, then each is filled
	guests := []*bigVM{newRealSizeVM(t, root, "rs-big", true)}
	for _, name := range []string{"rs-a", "rs-b", "rs-c"} {
		guests = append(guests, newRealSizeVM(t, root, name, false))
	}
	for _, b := range guests {
		v(t, root, "vm", "start", b.name)
	}
	for i, b := range guests {
		dirty := 192
		if i == 0 {
			dirty = realDirtyMiB
		}
		b.prepare(t, dirty)
	}
	pids := map[string]int{}
	for _, b := range guests {
		pids[b.name] = entry(t, root, b.name).PID
	}

	r := virt(t, nil, "--root", root, "host", "shutdown-guests", "-o", "json")
	t.Logf("shutdown-guests (save) of 4 x 1 GiB guests: %v, exit %d\n%s", r.elapsed.Round(time.Millisecond), r.code, r.stderr)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if r.elapsed > realShutdownTimeout {
		t.Errorf("shutdown-guests took %v; want within its timeout %v", r.elapsed, realShutdownTimeout)
	}
	var rep host.ShutdownReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	saved := map[string]int64{}
	for _, o := range rep.Outcomes {
		if o.Outcome == host.ShutdownSaved {
			saved[o.Name] = o.SavedBytes
		}
	}
	if len(saved) != 4 || saved["rs-big"] < int64(realDirtyMiB)<<20 {
		t.Fatalf("outcomes %+v; want the 4 saved, rs-big with at least %d MiB", rep.Outcomes, realDirtyMiB)
	}
	last := map[string]int{}
	for _, b := range guests {
		if e := entry(t, root, b.name); e.Phase != vm.PhaseSaved || alive(pids[b.name]) {
			t.Errorf("%s after the shutdown: %s, QEMU alive %v; want Saved, gone", b.name, e.Phase, alive(pids[b.name]))
		}
		last[b.name] = b.lastCounter()
	}

	// the reboot empties /run, and the shutdown's marker with it
	if err := os.Remove(host.ShuttingDownFile(layout)); err != nil {
		t.Fatalf("shutdown-guests left no shutting-down marker: %v", err)
	}
	from := map[string]int{}
	for _, b := range guests {
		from[b.name] = len(serialLog(root, b.uid))
	}
	r = virtIn(t, netns(t), "--root", root, "host", "boot", "-o", "json")
	t.Logf("host boot resuming 4 x 1 GiB guests: %v, exit %d", r.elapsed.Round(time.Millisecond), r.code)
	if r.code != 0 {
		t.Fatalf("virt host boot: exit %d: %s", r.code, r.stderr)
	}
	var boot host.BootRecord
	if err := json.Unmarshal([]byte(r.stdout), &boot); err != nil {
		t.Fatal(err)
	}
	started := map[string]bool{}
	for _, b := range boot.VMs {
		started[b.Name] = b.Outcome == host.BootStarted && b.Why == host.WhySaved
	}
	for _, b := range guests {
		if !started[b.name] {
			t.Errorf("boot VMs %+v; want %s started, why saved", boot.VMs, b.name)
			continue
		}
		b.wantRunning(t, b.name+" after the boot")
		b.wantGoesOn(t, b.name+" resumed by the boot", from[b.name], last[b.name])
	}
	guests[0].wantGuestData(t, "rs-big after the resume")
}
