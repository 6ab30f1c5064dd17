package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/paths"
)

// vm create's autostart flags reach the spec, vm show and vm list -o wide
// show them, and JSON carries them with their defaults.
func TestVMAutostartFlags(t *testing.T) {
	root, kernel := vmRoot(t)
	createdUID(t, root, kernel, "web", "--autostart", "--startup-order", "2", "--startup-delay", "90")
	createdUID(t, root, kernel, "db")
	show := mustRun(t, "--root", root, "vm", "show", "web")
	if !strings.Contains(show, "Autostart:") || !strings.Contains(show, "yes (virt host boot starts it; startup order 2, delay 1m30s)") {
		t.Errorf("vm show lacks the autostart line:\n%s", show)
	}
	if show := mustRun(t, "--root", root, "vm", "show", "db"); !strings.Contains(show, "no (virt host boot leaves it stopped; startup order 0, delay 0s)") {
		t.Errorf("vm show db:\n%s", show)
	}
	wide := mustRun(t, "--root", root, "vm", "list", "-o", "wide")
	lines := strings.Split(wide, "\n")
	if f := strings.Fields(lines[0]); len(f) != 11 || f[7] != "AUTOSTART" || f[8] != "ORDER" || f[9] != "DELAY" || f[10] != "UID" {
		t.Errorf("wide header %q", lines[0])
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "web":
			if f[7] != "yes" || f[8] != "2" || f[9] != "1m30s" {
				t.Errorf("wide row of web: %q", l)
			}
		case len(f) > 0 && f[0] == "db":
			if f[7] != "no" || f[8] != "0" || f[9] != "0s" {
				t.Errorf("wide row of db: %q", l)
			}
		}
	}
	if plain := mustRun(t, "--root", root, "vm", "list"); strings.Contains(plain, "AUTOSTART") {
		t.Errorf("the plain table got the wide columns:\n%s", plain)
	}
	for _, r := range ours(t, mustRun(t, "--root", root, "vm", "list", "-o", "json")) {
		want := map[string]any{"autostart": false, "startupOrder": 0.0, "startupDelay": "0s"}
		if r["name"] == "web" {
			want = map[string]any{"autostart": true, "startupOrder": 2.0, "startupDelay": "1m30s"}
		}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("%s: JSON %s = %#v; want %#v", r["name"], k, r[k], v)
			}
		}
	}
}

func TestVMAutostartFlagsRefused(t *testing.T) {
	root, kernel := vmRoot(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--startup-order", "10000"}, "spec.startup.order"},
		{[]string{"--startup-delay", "2h"}, "spec.startup.delay"},
		{[]string{"--startup-delay", "soon"}, "--startup-delay"},
	} {
		_, errOut, code := run(t, append([]string{"--root", root, "vm", "create", "x", "--kernel", kernel}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("vm create %v: exit %d, %q; want %d naming %s", tc.args, code, errOut, ExitUsage, tc.want)
		}
	}
	if _, errOut, code := run(t, "--root", root, "host", "info", "-o", "wide"); code != ExitUsage || !strings.Contains(errOut, "no wide table") {
		t.Errorf("host info -o wide: exit %d, %q; want a usage error", code, errOut)
	}
}

// virt host boot on a host with nothing to do, then with a broken
// host.yaml: refused by field and value (exit 2), on stderr and in the
// record that virt host status shows.
func TestHostBootAndStatus(t *testing.T) {
	root, kernel := vmRoot(t)
	createdUID(t, root, kernel, "idle")
	out, errOut, code := run(t, "--root", root, "host", "boot", "-o", "json")
	if code != 0 {
		t.Fatalf("host boot: exit %d: %s", code, errOut)
	}
	var rec host.BootRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("host boot -o json: %v\n%s", err, out)
	}
	if rec.Network.Result != host.NetNone || len(rec.VMs) != 0 || rec.Policy == nil {
		t.Errorf("record %+v; want no network, no VM, the default policy", rec)
	}
	if !strings.Contains(errOut, "network not configured") || !strings.Contains(errOut, "no VM to start") {
		t.Errorf("stderr %q; want the summary", errOut)
	}
	st := mustRun(t, "--root", root, "host", "status")
	for _, want := range []string{"the defaults (no ", "Last boot:", "no VM to start", "none recorded (virt host shutdown-guests has not run)"} {
		if !strings.Contains(st, want) {
			t.Errorf("host status lacks %q:\n%s", want, st)
		}
	}

	layout := paths.New(root)
	if err := os.MkdirAll(layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout.ConfigDir(), "host.yaml"), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\nstartDelay: 2d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(t, "--root", root, "host", "boot")
	if code != ExitUsage || !strings.Contains(errOut, `startDelay: "2d" is not a duration`) || !strings.Contains(errOut, "no VM started") {
		t.Errorf("host boot with a broken host.yaml: exit %d, %q; want 2, the value and no VM started", code, errOut)
	}
	st = mustRun(t, "--root", root, "host", "status")
	if !strings.Contains(st, "REFUSED: ") || !strings.Contains(st, "starts no VM until it is fixed") {
		t.Errorf("host status with a broken host.yaml:\n%s", st)
	}
	var js host.Status
	if err := json.Unmarshal([]byte(mustRun(t, "--root", root, "host", "status", "-o", "json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.Policy != nil || js.PolicyError == "" || js.Boot == nil || js.Boot.PolicyError == "" || !js.BootOfThisBoot {
		t.Errorf("host status -o json: %+v", js)
	}
}

// virt vm autostart sets autostart, keeping the order and delay unless
// told otherwise.
func TestVMAutostartCmd(t *testing.T) {
	root, kernel := vmRoot(t)
	createdUID(t, root, kernel, "web", "--startup-order", "3", "--startup-delay", "5s")
	if out := mustRun(t, "--root", root, "vm", "autostart", "web", "on"); !strings.Contains(out, "web: autostart on, startup order 3, delay 5s") {
		t.Errorf("vm autostart web on: %q", out)
	}
	if out := mustRun(t, "--root", root, "vm", "autostart", "web", "off", "--startup-delay", "0"); !strings.Contains(out, "web: autostart off, startup order 3, delay 0s") {
		t.Errorf("vm autostart web off --startup-delay 0: %q", out)
	}
	for _, args := range [][]string{{"web", "maybe"}, {"web", "on", "--startup-order", "-1"}} {
		if _, errOut, code := run(t, append([]string{"--root", root, "vm", "autostart"}, args...)...); code != ExitUsage {
			t.Errorf("vm autostart %v: exit %d (%s); want %d", args, code, errOut, ExitUsage)
		}
	}
}
