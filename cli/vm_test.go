package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/vm"
)

// vmRoot is a private --root with a stand-in kernel: VMs booting a kernel
// directly need no qemu-img, and none is started here.
func vmRoot(t *testing.T) (root, kernel string) {
	t.Helper()
	root, err := os.MkdirTemp("", "vc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	kernel = filepath.Join(root, "vmlinuz")
	if err := os.WriteFile(kernel, []byte("not a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, kernel
}

// ours decodes a vm list and keeps the rows of VMs with a spec: other
// tests' guests, running under other roots at the same time, are listed
// too (as EXTERNAL).
func ours(t *testing.T, listJSON string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	if err := json.Unmarshal([]byte(listJSON), &rows); err != nil {
		t.Fatalf("vm list: %v\n%s", err, listJSON)
	}
	var out []map[string]any
	for _, r := range rows {
		switch r["class"] {
		case vm.ClassManaged, vm.ClassMissing, vm.ClassUnreadable:
			out = append(out, r)
		}
	}
	return out
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("virt %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func createdUID(t *testing.T, root, kernel, name string, extra ...string) string {
	t.Helper()
	var e vm.Entry
	out := mustRun(t, append([]string{"--root", root, "vm", "create", name, "--kernel", kernel, "-o", "json"}, extra...)...)
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("create %s: %v: %s", name, err, out)
	}
	return e.UID
}

// Bad flags are refused with the field, the value and the limit (issue 9,
// items 1 and 12), never quietly replaced by a default.
func TestVMCreateRefuses(t *testing.T) {
	root, kernel := vmRoot(t)
	victim := createdUID(t, root, kernel, "victim")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"UUID-shaped name", []string{victim}, []string{"metadata.name", victim, "UUID"}},
		{"memory in KiB", []string{"m1", "--memory", "64K"}, []string{"--memory", `"64K"`, "16 MiB"}},
		{"memory below the minimum", []string{"m2", "--memory", "8"}, []string{"--memory", `"8"`, "16 MiB"}},
		{"memory not a size", []string{"m3", "--memory", "lots"}, []string{"--memory", `"lots"`}},
		{"no CPUs", []string{"c1", "--cpus", "0"}, []string{"--cpus 0", "at least 1"}},
		{"negative CPUs", []string{"c2", "--cpus", "-2"}, []string{"--cpus -2", "at least 1"}},
		{"network and bridge", []string{"n1", "--network", "default,bridge=br0"}, []string{"--network", "exactly one"}},
		{"network unknown key", []string{"n2", "--network", "bridge=br0,vlan=4"}, []string{"--network", `"vlan"`}},
		// none is user-mode networking, which is no NIC of its own
		{"none with a NIC", []string{"n3", "--network", "none", "--network", "default"}, []string{"--network none (user-mode networking) cannot be given with other --network NICs"}},
		{"network=none", []string{"n4", "--network", "network=none"}, []string{`spec.network[0].network: is no network: leave spec.network out for QEMU user-mode networking`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--root", root, "vm", "create"}, tt.args[0], "--kernel", kernel)
			_, errOut, code := run(t, append(args, tt.args[1:]...)...)
			if code != ExitUsage {
				t.Errorf("exit %d; want %d (stderr %s)", code, ExitUsage, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q; want it to contain %q", errOut, w)
				}
			}
		})
	}
	// nothing was created by the refused commands
	if entries := ours(t, mustRun(t, "--root", root, "vm", "list", "-o", "json")); len(entries) != 1 {
		t.Errorf("vm list after refusals: %d VMs %+v; want only the victim", len(entries), entries)
	}
}

func TestVMCreateSizesAndNICs(t *testing.T) {
	root, kernel := vmRoot(t)
	for i, tt := range []struct{ memory, want string }{{"1.5G", "1536"}, {"1Gi", "1024"}, {"1GiB", "1024"}, {"768", "768"}} {
		name := fmt.Sprintf("m%d", i)
		createdUID(t, root, kernel, name, "--memory", tt.memory)
		out := mustRun(t, "--root", root, "vm", "show", name, "-o", "json")
		if !strings.Contains(out, `"memoryMiB": `+tt.want) {
			t.Errorf("--memory %s: show has no memoryMiB %s:\n%s", tt.memory, tt.want, out)
		}
	}
	// --network none is what its help says: user-mode networking, no NIC
	// in the spec (it was a NIC on a network "none", failing at start)
	createdUID(t, root, kernel, "usermode", "--network", "none")
	var um vm.VirtualMachine
	if err := json.Unmarshal([]byte(mustRun(t, "--root", root, "vm", "show", "usermode", "-o", "json")), &um); err != nil {
		t.Fatal(err)
	}
	if len(um.Spec.Network) != 0 {
		t.Errorf("--network none: spec.network %+v; want none (user-mode)", um.Spec.Network)
	}
	uid := createdUID(t, root, kernel, "nics", "--network", "default", "--network", "bridge=br0,mac=52:54:00:aa:bb:cc,model=e1000")
	var v vm.VirtualMachine
	if err := json.Unmarshal([]byte(mustRun(t, "--root", root, "vm", "show", "nics", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	want := []vm.NIC{{Network: "default", MAC: vm.MACFor(uid, 0), Model: "virtio"}, {Bridge: "br0", MAC: "52:54:00:aa:bb:cc", Model: "e1000"}}
	if len(v.Spec.Network) != 2 || v.Spec.Network[0] != want[0] || v.Spec.Network[1] != want[1] {
		t.Errorf("spec.network: got %+v; want %+v", v.Spec.Network, want)
	}
	// the table shows each NIC: what it is on, its MAC and its TAP
	table := mustRun(t, "--root", root, "vm", "show", "nics")
	for _, w := range []string{"NIC 0:", "network default", "NIC 1:", "bridge br0", "52:54:00:aa:bb:cc", "e1000", "tap "} {
		if !strings.Contains(table, w) {
			t.Errorf("vm show table lacks %q:\n%s", w, table)
		}
	}
}

// A stopped VM's pid, an unknown accelerator, an unobserved generation
// are null in JSON, never 0 or "" (docs/cli.md).
func TestVMListJSONNulls(t *testing.T) {
	root, kernel := vmRoot(t)
	createdUID(t, root, kernel, "n1")
	rows := ours(t, mustRun(t, "--root", root, "vm", "list", "-o", "json"))
	if len(rows) != 1 {
		t.Fatalf("vm list: %v", rows)
	}
	for _, k := range []string{"pid", "accel", "observedGeneration", "directorGeneration"} {
		if v, ok := rows[0][k]; !ok || v != nil {
			t.Errorf("%s: got %v (present %v); want null", k, v, ok)
		}
	}
	if rows[0]["cpus"] != 1.0 || rows[0]["memoryMiB"] != 512.0 {
		t.Errorf("known values: got cpus %v memoryMiB %v; want 1 and 512", rows[0]["cpus"], rows[0]["memoryMiB"])
	}
	yml := mustRun(t, "--root", root, "vm", "list", "-o", "yaml")
	if !strings.Contains(yml, "pid: null") {
		t.Errorf("vm list -o yaml has no pid: null:\n%s", yml)
	}
}

// An unreadable spec fails closed in every command (issue 9, item 2).
func TestVMUnreadableSpec(t *testing.T) {
	root, kernel := vmRoot(t)
	uid := createdUID(t, root, kernel, "k1")
	createdUID(t, root, kernel, "k2")
	spec := filepath.Join(root, "var/lib/virtcon/vms", uid, "vm.yaml")
	if err := os.Truncate(spec, 40); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"vm", "show", "k1"}, {"vm", "start", "k1"}, {"vm", "stop", "k1"}, {"vm", "delete", "k1"},
		{"vm", "create", "k1", "--kernel", kernel}, {"vm", "create", "k3", "--kernel", kernel}} {
		_, errOut, code := run(t, append([]string{"--root", root}, args...)...)
		if code != ExitError || !strings.Contains(errOut, spec) || strings.Contains(errOut, "not found") {
			t.Errorf("virt %s: exit %d, stderr %q; want exit 1 naming %s", strings.Join(args, " "), code, errOut, spec)
		}
	}
	out, errOut, code := run(t, "--root", root, "vm", "list", "-o", "json")
	if code != ExitError || !strings.Contains(errOut, spec) {
		t.Errorf("vm list: exit %d, stderr %q; want exit 1 naming %s", code, errOut, spec)
	}
	var rows []vm.Entry
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("vm list JSON: %v\n%s", err, out)
	}
	classes := map[string]string{}
	for _, r := range rows {
		if r.Class == vm.ClassOrphaned && strings.HasPrefix(r.Path, root) {
			t.Errorf("vm list: ORPHANED row %+v", r)
		}
		if r.Class != vm.ClassExternal { // other tests' guests
			classes[r.UID] = r.Class
		}
	}
	if classes[uid] != vm.ClassUnreadable || len(classes) != 2 {
		t.Errorf("vm list: got %v; want k1 UNREADABLE and k2", classes)
	}
	if _, _, code := run(t, "--root", root, "vm", "show", "k2"); code != 0 {
		t.Errorf("vm show k2 (readable): exit %d; want 0", code)
	}
}

// A name that is one VM's UID and another's name is refused, not guessed.
func TestVMAmbiguousReference(t *testing.T) {
	root, kernel := vmRoot(t)
	victim := createdUID(t, root, kernel, "victim")
	// an impostor stored before the admission rule: its name is victim's UID
	dir := filepath.Join(root, "var/lib/virtcon/vms", "00000000-0000-4000-8000-000000000001")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "var/lib/virtcon/vms", victim, "vm.yaml"))
	s := strings.Replace(string(b), "name: victim", "name: "+victim, 1)
	s = strings.Replace(s, "uid: "+victim, "uid: 00000000-0000-4000-8000-000000000001", 1)
	if err := os.WriteFile(filepath.Join(dir, "vm.yaml"), []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "--root", root, "vm", "delete", victim)
	if code != ExitError || !strings.Contains(errOut, "ambiguous") {
		t.Errorf("vm delete %s: exit %d, stderr %q; want exit 1, ambiguous", victim, code, errOut)
	}
	mustRun(t, "--root", root, "vm", "show", "victim")
}

// Every duration flag also takes bare seconds; a bad one is a usage error.
func TestDurationFlags(t *testing.T) {
	root, kernel := vmRoot(t)
	createdUID(t, root, kernel, "d1")
	for _, ok := range []string{"30", "0", "1.5", "90s", "2m"} {
		if _, errOut, code := run(t, "--root", root, "vm", "stop", "d1", "--timeout", ok); code != 0 {
			t.Errorf("--timeout %s: exit %d: %s", ok, code, errOut)
		}
	}
	for _, bad := range []string{"-5", "soon", "5x"} {
		if _, errOut, code := run(t, "--root", root, "vm", "stop", "d1", "--timeout", bad); code != ExitUsage || !strings.Contains(errOut, bad) {
			t.Errorf("--timeout %s: exit %d, stderr %q; want exit 2 naming it", bad, code, errOut)
		}
	}
	tests := []struct {
		in   string
		want string
	}{{"30", "30s"}, {"1.5", "1.5s"}, {"0", "0s"}, {"2m", "2m0s"}, {" 45 ", "45s"}}
	for _, tt := range tests {
		d, err := parseSeconds(tt.in)
		if err != nil || d.String() != tt.want {
			t.Errorf("parseSeconds(%q): got %v, %v; want %s", tt.in, d, err, tt.want)
		}
	}
}

// --network and --image complete from network.yaml, the host's bridges
// and the image store.
func TestVMCreateCompletion(t *testing.T) {
	root, _ := vmRoot(t)
	cfg := filepath.Join(root, "etc/virtcon/network.yaml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o700); err != nil {
		t.Fatal(err)
	}
	yml := "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: br-lan\nnetworks:\n  - name: lab\n    type: nat\n    bridge: vnat0\n    subnet: 192.168.77.0/24\n"
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "--root", root, "__complete", "vm", "create", "x", "--network", "")
	for _, w := range []string{"lab\n", "bridge=br-lan\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("--network completion lacks %q:\n%s", w, out)
		}
	}
	if out := mustRun(t, "--root", root, "__complete", "net", "bridge", "delete", ""); !strings.HasPrefix(out, "br-lan\n") {
		t.Errorf("net bridge delete completion: got %q; want br-lan", out)
	}
	if out := mustRun(t, "--root", root, "__complete", "net", "nat", "delete", ""); !strings.HasPrefix(out, "lab\n") {
		t.Errorf("net nat delete completion: got %q; want lab", out)
	}
}
