package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
)

func writeNetFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Without a management interface `virt net test` has one failing check:
// exit 3, and the JSON is the result list.
func TestNetTestNoManagement(t *testing.T) {
	root := t.TempDir()
	out, errOut, code := run(t, "net", "test", "--root", root, "-o", "json")
	if code != ExitCheckFailed {
		t.Fatalf("exit %d; want %d (stderr %s)", code, ExitCheckFailed, errOut)
	}
	var rs []netcfg.CheckResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("output is not a result list: %v\n%s", err, out)
	}
	if len(rs) != 1 || rs[0].OK || !strings.Contains(rs[0].Detail, "no management interface") {
		t.Errorf("results %+v; want one failure: no management interface", rs)
	}
	out, _, code = run(t, "net", "test", "--root", root)
	if code != ExitCheckFailed || !strings.Contains(out, "FAIL") || !strings.Contains(out, "management") {
		t.Errorf("table output (exit %d):\n%s", code, out)
	}
}

func TestNetEditRefusals(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	writeNetFile(t, netcfg.DesiredFile(layout), `apiVersion: virtcon/v1
kind: HostNetwork
bridges:
  - name: br0
networks:
  - name: lan
    type: bridged
    bridge: br0
`)
	tryFile := filepath.Join(root, "try.yaml")
	writeNetFile(t, tryFile, "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vctestnone0\n    stp: true\n")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"reset to a NIC that does not exist", []string{"net", "reset-dhcp", "vcnosuchnic0"}, ExitUsage, `management.interface: no such interface on the host (got "vcnosuchnic0")`},
		{"reset without a NIC", []string{"net", "reset-dhcp"}, ExitUsage, "accepts 1 arg"},
		{"delete a bridge a network uses", []string{"net", "bridge", "delete", "br0"}, ExitUsage, `bridge "br0" carries network "lan": delete or change the network first`},
		{"delete a bridge not in the file", []string{"net", "bridge", "delete", "br9"}, ExitError, `bridge "br9" is not in ` + netcfg.DesiredFile(layout) + " (virtcon deletes only bridges it made)"},
		{"create a bridge twice", []string{"net", "bridge", "create", "br0"}, ExitUsage, `bridge "br0" is already in ` + netcfg.DesiredFile(layout)},
		{"try shorter than STP", []string{"net", "apply", "-f", tryFile, "--try", "10s"}, ExitUsage, "STP on the bridges involved"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := run(t, append(tc.args, "--root", root)...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Errorf("virt %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.msg)
			}
			for _, f := range []string{netcfg.DesiredPendingFile(layout), netcfg.AppliedFile(layout), netcfg.PendingPath(layout)} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s written by a refused command", f)
				}
			}
		})
	}
}

// reset-dhcp is always a try: --try 0 or negative is a usage error that
// says why, and nothing is written.
func TestNetResetDHCPNeedsTry(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	for _, try := range []string{"0", "0s"} {
		_, errOut, code := run(t, "net", "reset-dhcp", "eth0", "--try", try, "--root", root)
		if code != ExitUsage || !strings.Contains(errOut, "always a try") || !strings.Contains(errOut, "cut off") {
			t.Errorf("reset-dhcp --try %s: exit %d, stderr %q; want exit %d explaining the reset is always a try", try, code, errOut, ExitUsage)
		}
	}
	// a negative duration is refused by the flag itself, as for every duration flag
	if _, errOut, code := run(t, "net", "reset-dhcp", "eth0", "--try", "-5s", "--root", root); code != ExitUsage || !strings.Contains(errOut, "must not be negative") {
		t.Errorf("reset-dhcp --try -5s: exit %d, stderr %q; want exit %d, must not be negative", code, errOut, ExitUsage)
	}
	for _, f := range []string{netcfg.DesiredPendingFile(layout), netcfg.AppliedFile(layout), netcfg.PendingPath(layout)} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s written by a refused reset", f)
		}
	}
	cmd := newNetResetDHCPCmd(&Env{})
	if got := cmd.Flags().Lookup("try").DefValue; got != "1m0s" {
		t.Errorf("reset-dhcp --try defaults to %s; want 1m0s", got)
	}
}

// A network.yaml that does not decode does not block the way back:
// reset-dhcp warns, naming the decode error, and goes on from the applied
// configuration (here it then stops at the NIC, which does not exist).
func TestNetResetDHCPBrokenFile(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	writeNetFile(t, netcfg.DesiredFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n")
	writeNetFile(t, netcfg.AppliedFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: applied\n")
	_, errOut, code := run(t, "net", "reset-dhcp", "vcnosuchnic0", "--root", root)
	if !strings.Contains(errOut, "warning: ") || !strings.Contains(errOut, "frob") || !strings.Contains(errOut, "starting from the applied configuration") {
		t.Errorf("stderr %q; want a warning naming the decode error and the fallback", errOut)
	}
	if code != ExitUsage || !strings.Contains(errOut, `no such interface on the host (got "vcnosuchnic0")`) {
		t.Errorf("exit %d, stderr %q; want the reset to go on to the NIC check", code, errOut)
	}
}

// While a try is pending `virt net test` tests the file on trial, not
// network.yaml.
func TestNetTestDuringTry(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	writeNetFile(t, netcfg.DesiredFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nmanagement:\n  interface: vcnoneold0\n  dhcp: true\n")
	writeNetFile(t, netcfg.DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nmanagement:\n  interface: vcnonenew0\n  dhcp: true\n")
	now := time.Now()
	rec, err := json.Marshal(&netcfg.Pending{ID: "0123456789abcdef", Started: now, Deadline: now.Add(time.Minute), Snapshot: &netcfg.Snapshot{}})
	if err != nil {
		t.Fatal(err)
	}
	writeNetFile(t, netcfg.PendingPath(layout), string(rec))
	out, errOut, _ := run(t, "net", "test", "--root", root, "-o", "json")
	if !strings.Contains(out, "vcnonenew0") || strings.Contains(out, "vcnoneold0") {
		t.Errorf("virt net test during a try:\n%s\n(stderr %s)\nwant the checks of vcnonenew0, the interface on trial", out, errOut)
	}
}
