//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/vm"
)

// A memory snapshot that is on the disk but not in snapshots.json (what
// a --memory create leaves when virt is killed before it records it) is
// listed as UNRECORDED and its restore is refused before anything starts
// or is loaded, running (--force) or stopped; snapshot delete removes it
// from the disk.
func TestIntegrationVMSnapshotUnrecorded(t *testing.T) {
	root, uid, disk := snapshotGuest(t, "u1")
	v(t, root, "vm", "snapshot", "create", "u1", "lost", "--memory")
	// as if virt died before writing its record
	recPath := filepath.Join(root, "var/lib/virtcon/vms", uid, "snapshots.json")
	b, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec["snapshots"].(map[string]any), "lost")
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if s := snapshotList(t, root, "u1")["lost"]; s.State != vm.SnapshotUnrecorded || !s.Memory || !strings.Contains(s.Why, "snapshots.json") {
		t.Fatalf("snapshot list: lost = %+v; want unrecorded, memory, with why", s)
	}
	if out := v(t, root, "vm", "snapshot", "list", "u1"); !strings.Contains(out, "UNRECORDED") {
		t.Errorf("snapshot list table: %q; want UNRECORDED", out)
	}
	r := virt(t, nil, "--root", root, "vm", "snapshot", "restore", "u1", "lost", "--force")
	if r.code != 1 || !strings.Contains(r.stderr, "unrecorded") || !strings.Contains(r.stderr, "virt vm snapshot delete u1 lost") {
		t.Errorf("restore --force of the unrecorded snapshot: exit %d, stderr %q; want exit 1, unrecorded, the delete hint", r.code, r.stderr)
	}
	if e := entry(t, root, "u1"); e.Phase != vm.PhaseRunning {
		t.Errorf("after the refused restore: %s; want the guest running on", e.Phase)
	}
	guestSays(t, root, "u1", "echo ALIVE-$((40+2))", "ALIVE-42")
	v(t, root, "vm", "stop", "u1", "--force")
	r = virt(t, nil, "--root", root, "vm", "snapshot", "restore", "u1", "lost")
	if r.code != 1 || !strings.Contains(r.stderr, "unrecorded") {
		t.Errorf("restore of the stopped VM: exit %d, stderr %q; want exit 1, unrecorded", r.code, r.stderr)
	}
	if e := entry(t, root, "u1"); e.Phase != vm.PhaseStopped {
		t.Errorf("after the refused restore of the stopped VM: %s; want it stopped (nothing started)", e.Phase)
	}
	imgCheck(t, disk, false)
	v(t, root, "vm", "snapshot", "delete", "u1", "lost")
	if out, err := exec.Command("qemu-img", "snapshot", "-l", disk).CombinedOutput(); err != nil || strings.Contains(string(out), "lost") {
		t.Errorf("qemu-img snapshot -l after the delete: %v: %s; want no lost", err, out)
	}
}
