//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/vm"
)

// resyncRow is one VM as both sides list it: (node, uid, name, class,
// phase).
type resyncRow struct{ Node, UID, Name, Class, Phase string }

func (r resyncRow) String() string {
	return fmt.Sprintf("%.8s %s %s %s %s", r.Node, r.UID, r.Name, r.Class, r.Phase)
}

// resyncEnrol enrols the host at root into the director on data and
// returns its node id.
func resyncEnrol(t *testing.T, vd, data, root string) string {
	t.Helper()
	var created struct {
		JoinString string `json:"joinString"`
	}
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "token", "create", "-o", "json")), &created); err != nil {
		t.Fatalf("token create -o json: %v", err)
	}
	joinFile := filepath.Join(root, "join.txt")
	if err := os.WriteFile(joinFile, []byte(created.JoinString+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := virt(t, nil, "--root", root, "agent", "enroll", "--join-file", joinFile, "-o", "json")
	if r.code != 0 {
		t.Fatalf("virt --root %s agent enroll: exit %d\nstderr: %s", root, r.code, r.stderr)
	}
	var st struct {
		NodeID string `json:"nodeId"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.NodeID == "" {
		t.Fatalf("agent enroll -o json: %v: %s", err, r.stdout)
	}
	return st.NodeID
}

// hostRows is `virt --root root vm list -o json` as rows of node.
func hostRows(t *testing.T, root, node string) []resyncRow {
	t.Helper()
	var entries []vm.Entry
	if err := json.Unmarshal([]byte(v(t, root, "vm", "list", "-o", "json")), &entries); err != nil {
		t.Fatalf("virt --root %s vm list -o json: %v", root, err)
	}
	var rows []resyncRow
	for _, e := range entries {
		rows = append(rows, resyncRow{node, e.UID, e.Name, e.Class, e.Phase})
	}
	return rows
}

// directorRows is `virt-director vm list -o json` as rows.
func directorRows(t *testing.T, vd, data string) ([]resyncRow, string) {
	t.Helper()
	out := vdir(t, vd, data, "vm", "list", "-o", "json")
	var vms []struct {
		NodeID string `json:"nodeId"`
		UID    string `json:"uid"`
		Name   string `json:"name"`
		Class  string `json:"class"`
		Phase  string `json:"phase"`
	}
	if err := json.Unmarshal([]byte(out), &vms); err != nil {
		t.Fatalf("virt-director vm list -o json: %v\n%s", err, out)
	}
	var rows []resyncRow
	for _, x := range vms {
		rows = append(rows, resyncRow{x.NodeID, x.UID, x.Name, x.Class, x.Phase})
	}
	return rows, out
}

func sortRows(rows []resyncRow) []resyncRow {
	slices.SortFunc(rows, func(a, b resyncRow) int { return strings.Compare(a.String(), b.String()) })
	return rows
}

// only keeps the rows of the guests this test made. Tests of other
// packages run at the same time on this machine, and their QEMUs are
// EXTERNAL to every root here; a host reports external guests in a full
// inventory and its 5 min reconciliation (they have no events), so
// counting theirs would compare two moments.
func only(rows []resyncRow, uids map[string]bool) []resyncRow {
	var out []resyncRow
	for _, r := range rows {
		if uids[r.UID] {
			out = append(out, r)
		}
	}
	return out
}

// waitInventory waits until the director's VM list equals the union of
// the hosts' own lists (the test's guests), and returns how long that
// took.
func waitInventory(t *testing.T, vd, data string, hosts map[string]string, uids map[string]bool, timeout time.Duration, when string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var want []resyncRow
		for node, root := range hosts {
			want = append(want, hostRows(t, root, node)...)
		}
		got, out := directorRows(t, vd, data)
		want, got = sortRows(only(want, uids)), sortRows(only(got, uids))
		if slices.Equal(want, got) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: virt-director vm list is not the union of the hosts' virt vm list after %v\nhosts:\n%v\ndirector:\n%v\n%s",
				when, timeout, want, got, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// The director's VM inventory is the hosts' ground truth, and comes back
// from them after the director loses its etcd data: its CA and nodes are
// restored from recovery.json, the agents reconnect with the
// certificates they hold and answer the Resync. EXTERNAL guests and
// ORPHANED leftovers are in it, labelled, never adopted or deleted.
func TestIntegrationDirectorResync(t *testing.T) {
	g := requireGuest(t)
	vd := requireDirector(t)
	data, err := os.MkdirTemp("", "vd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	logs := t.TempDir()
	addr := freeLoopback(t)
	dir1 := startDirector(t, vd, data, addr, filepath.Join(logs, "director-1.log"))

	// host 1: a running guest; host 2: a stopped VM and an orphaned
	// volume directory; both see an external QEMU (one machine)
	root1, root2 := vmRoot(t), vmRoot(t)
	running := createGuest(t, root1, "rs-run", g.initrd, true)
	var stopped vm.Entry
	if err := json.Unmarshal([]byte(v(t, root2, "vm", "create", "rs-stopped", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "128", "-o", "json")), &stopped); err != nil {
		t.Fatal(err)
	}
	orphan := uuid.NewString()
	if err := os.MkdirAll(filepath.Join(root2, "var/lib/virtcon/vms", orphan), 0o700); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	t.Cleanup(func() { killUnder(other) })
	extUID := "6f1c1a8e-0000-4000-8000-00000000e0a1"
	uids := map[string]bool{running: true, stopped.UID: true, orphan: true, extUID: true}
	ext := exec.Command("qemu-system-x86_64", "-name", "guest=rs-ext", "-uuid", extUID,
		"-accel", "tcg", "-nodefaults", "-display", "none", "-S", "-daemonize", "-pidfile", filepath.Join(other, "ext.pid"),
		"-qmp", "unix:"+filepath.Join(other, "q.sock")+",server=on,wait=off")
	if out, err := ext.CombinedOutput(); err != nil {
		t.Fatalf("starting an external QEMU: %v: %s", err, out)
	}
	dir1.waitOutput(t, "virt-director: serving on", 60*time.Second)

	node1, node2 := resyncEnrol(t, vd, data, root1), resyncEnrol(t, vd, data, root2)
	hosts := map[string]string{node1: root1, node2: root2}
	for i, root := range []string{root1, root2} {
		startChild(t, "virt agent run", filepath.Join(logs, fmt.Sprintf("agent-%d.log", i+1)), virtBin, "--root", root, "agent", "run")
	}
	for node := range hosts {
		waitNode(t, vd, data, node, 30*time.Second, "Ready and connected", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
	}
	took := waitInventory(t, vd, data, hosts, uids, 30*time.Second, "first sync")
	t.Logf("first inventory equal to the hosts' %v after both nodes were Ready", took.Round(time.Millisecond))
	rows, _ := directorRows(t, vd, data)
	rows = only(rows, uids)
	classes := map[string]int{}
	sawRunning := false
	for _, r := range rows {
		classes[r.Class]++
		if r.UID == running && r.Node == node1 {
			sawRunning = true
			if r.Phase != vm.PhaseRunning || r.Class != vm.ClassManaged {
				t.Errorf("the running guest in the director's list: %v; want MANAGED Running", r)
			}
		}
	}
	// both "hosts" are one machine: each sees the external QEMU, and
	// host 2 sees host 1's guest as a QEMU that is not its own
	if !sawRunning || classes[vm.ClassManaged] != 2 || classes[vm.ClassExternal] != 3 || classes[vm.ClassOrphaned] != 1 {
		t.Errorf("director's VM classes of the test's guests %v (host 1's guest seen: %v); want 2 MANAGED, 3 EXTERNAL, 1 ORPHANED", classes, sawRunning)
	}

	// etcd's data lost: the director killed -9, its etcd directory
	// removed, the director started again on the same data directory
	rec := filepath.Join(data, director.RecoveryFileName)
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(rec)
		if strings.Contains(string(b), node1) && strings.Contains(string(b), node2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not name both nodes after 20 s", rec)
		}
		time.Sleep(200 * time.Millisecond)
	}
	dir1.kill()
	if err := os.RemoveAll(filepath.Join(data, "etcd")); err != nil {
		t.Fatal(err)
	}
	dir2 := startDirector(t, vd, data, addr, filepath.Join(logs, "director-2.log"))
	dir2.waitOutput(t, "virt-director: serving on", 60*time.Second)
	restarted := time.Now()
	waitInventory(t, vd, data, hosts, uids, 60*time.Second, "after the data loss")
	t.Logf("after the data loss: inventory rebuilt from the hosts %v after the director's start", time.Since(restarted).Round(time.Millisecond))
	es, out := auditOf(t, vd, data)
	if countAudit(es, "director.recover", "") != 1 {
		t.Errorf("audit after the data loss: want one director.recover\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root2, "var/lib/virtcon/vms", orphan)); err != nil {
		t.Errorf("the orphaned directory after the resync: %v; want it untouched", err)
	}
}
