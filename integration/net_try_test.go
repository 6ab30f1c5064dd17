//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
)

func linkExists(ns, name string) bool {
	return exec.Command("ip", "-n", ns, "link", "show", name).Run() == nil
}

// `virt net apply --try` through the CLI: the CLI exits at once, and the
// watchdog process it left rolls the change back at the deadline unless
// `virt net confirm` ran; `virt net rollback` undoes at once.
func TestIntegrationNetTryCLI(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	ns := netns(t)
	root := vmRoot(t)
	cfg := filepath.Join(root, "net.yaml")
	os.WriteFile(cfg, []byte("apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: brtry\n    addresses: [10.98.0.1/24]\n"), 0o600)

	// not confirmed: rolled back at the deadline by the watchdog
	start := time.Now()
	vns(t, ns, root, "net", "apply", "-f", cfg, "--try", "5s")
	if !linkExists(ns, "brtry") {
		t.Fatal("the tried bridge does not exist after apply")
	}
	if out := vns(t, ns, root, "net", "status"); !strings.Contains(out, "rolls back") {
		t.Errorf("net status during a try: %q", out)
	}
	for time.Since(start) < 12*time.Second && linkExists(ns, "brtry") {
		time.Sleep(200 * time.Millisecond)
	}
	if linkExists(ns, "brtry") {
		t.Fatal("an unconfirmed try was not rolled back within its 5s deadline (+7s)")
	}
	t.Logf("rolled back %v after the apply", time.Since(start).Round(100*time.Millisecond))
	// the watchdog removes its record just after restoring the links
	status := ""
	for i := 0; i < 30 && !strings.Contains(status, "no network change pending"); i++ {
		status = vns(t, ns, root, "net", "status")
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(status, "no network change pending") {
		t.Errorf("net status after the rollback: %q", status)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/virtcon/network.yaml")); err == nil {
		t.Error("a rolled-back try left its file as the desired network.yaml")
	}

	// confirmed: kept past the deadline
	vns(t, ns, root, "net", "apply", "-f", cfg, "--try", "5s")
	vns(t, ns, root, "net", "confirm")
	time.Sleep(6 * time.Second)
	if !linkExists(ns, "brtry") {
		t.Fatal("a confirmed try was rolled back")
	}
	if _, err := os.Stat(filepath.Join(root, "etc/virtcon/network.yaml")); err != nil {
		t.Errorf("confirm did not make the file the desired network.yaml: %v", err)
	}
	if r := virtIn(t, ns, "--root", root, "net", "confirm"); r.code == 0 {
		t.Error("confirm with nothing pending succeeded")
	}

	// explicit rollback: a second try that removes the bridge, undone at once
	os.WriteFile(cfg, []byte("apiVersion: virtcon/v1\nkind: HostNetwork\n"), 0o600)
	vns(t, ns, root, "net", "apply", "-f", cfg, "--try", "30s")
	if linkExists(ns, "brtry") {
		t.Fatal("the try did not remove the bridge")
	}
	vns(t, ns, root, "net", "rollback")
	if !linkExists(ns, "brtry") {
		t.Error("rollback did not bring the bridge back")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "var/lib/virtcon/network/applied.yaml")); !strings.Contains(string(b), "brtry") {
		t.Errorf("after the rollback, applied.yaml does not record the restored bridge:\n%s", b)
	}
	if out := vns(t, ns, root, "net", "show"); !strings.Contains(out, "in sync") {
		t.Errorf("after the rollback, net show = %q; want in sync", out)
	}
}

// Bad input is refused with the field named, and nothing is applied.
func TestIntegrationNetBadInput(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	ns := netns(t)
	root := vmRoot(t)
	cfg := filepath.Join(root, "net.yaml")
	os.WriteFile(cfg, []byte("apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: br-name-too-long0\n  - name: brok\n    colour: blue\n"), 0o600)
	r := virtIn(t, ns, "--root", root, "net", "apply", "-f", cfg)
	if r.code != 2 || !strings.Contains(r.stderr, "colour") {
		t.Errorf("unknown field: exit %d, %q; want 2 naming the field", r.code, r.stderr)
	}
	os.WriteFile(cfg, []byte("apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: br-name-too-long0\n"), 0o600)
	r = virtIn(t, ns, "--root", root, "net", "apply", "-f", cfg)
	if r.code != 2 || !strings.Contains(r.stderr, "br-name-too-long0") {
		t.Errorf("long name: exit %d, %q; want 2 naming the value", r.code, r.stderr)
	}
	if linkExists(ns, "brok") {
		t.Error("a refused file was partly applied")
	}
}

// The imperative helpers edit network.yaml and apply it.
func TestIntegrationNetImperative(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	ns := netns(t)
	root := vmRoot(t)
	vns(t, ns, root, "net", "bridge", "create", "bra", "--address", "10.55.0.1/24")
	out, _ := exec.Command("ip", "-n", ns, "-o", "addr", "show", "dev", "bra").Output()
	if !strings.Contains(string(out), "10.55.0.1/24") {
		t.Fatalf("bridge bra lacks its address: %s", out)
	}
	var rows []struct {
		Name    string
		Managed bool
	}
	json.Unmarshal([]byte(vns(t, ns, root, "net", "bridge", "list", "-o", "json")), &rows)
	if len(rows) != 1 || rows[0].Name != "bra" || !rows[0].Managed {
		t.Errorf("bridge list = %+v; want bra, managed", rows)
	}
	if r := virtIn(t, ns, "--root", root, "net", "bridge", "create", "bra"); r.code != 2 {
		t.Errorf("creating bra twice: exit %d; want 2", r.code)
	}
	vns(t, ns, root, "net", "nat", "create", "n1", "--subnet", "10.56.0.0/24")
	if !linkExists(ns, "vcnat-n1") {
		t.Fatal("nat create made no bridge")
	}
	if pids, _ := exec.Command("ip", "netns", "pids", ns).Output(); len(strings.Fields(string(pids))) == 0 {
		t.Error("no dnsmasq runs for the nat network")
	}
	if out := vns(t, ns, root, "net", "show"); !strings.Contains(out, "in sync") {
		t.Errorf("after the helpers, net show = %q", out)
	}
	vns(t, ns, root, "net", "nat", "delete", "n1")
	vns(t, ns, root, "net", "bridge", "delete", "bra")
	if linkExists(ns, "vcnat-n1") || linkExists(ns, "bra") {
		t.Error("deleted bridges still exist")
	}
	if pids, _ := exec.Command("ip", "netns", "pids", ns).Output(); len(strings.Fields(string(pids))) != 0 {
		t.Errorf("processes left in the namespace after nat delete: %s", pids)
	}
}
