package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	var rs []netcfg.TestResult
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
