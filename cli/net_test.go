package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
)

const netTestTryID = "0123456789abcdef"

// netTestRecord writes a pending try under root as a try that found
// applied.yaml holding before; its snapshot is empty, so a rollback
// changes no link, only files under root.
func netTestRecord(t *testing.T, root string, p netcfg.Pending, before string) {
	t.Helper()
	layout := paths.New(root)
	p.ID, p.Root, p.Snapshot, p.Applied = netTestTryID, root, &netcfg.Snapshot{}, []byte(before)
	if p.Started.IsZero() {
		p.Started = p.Deadline.Add(-time.Minute)
	}
	rec, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	writeNetFile(t, netcfg.PendingPath(layout), string(rec))
	writeNetFile(t, netcfg.AppliedFile(layout), netTestTrial)
}

// netTestTrial is applied.yaml while the test's try is pending.
const netTestTrial = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: trial\n"

// netTestDeadPID is the PID of a process that has exited.
func netTestDeadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return cmd.Process.Pid
}

// While a try is pending every command that changes the network is
// refused before it changes anything, naming the try, its deadline and
// the way out; a dry run still plans.
func TestNetChangesRefusedDuringTry(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	// no nat network: an apply ensures every one it has
	desired := "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vctestbr0\n"
	writeNetFile(t, netcfg.DesiredFile(layout), desired)
	file := filepath.Join(root, "new.yaml")
	writeNetFile(t, file, "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: plain\n")
	bad := filepath.Join(root, "bad.yaml")
	writeNetFile(t, bad, "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vctestbr1\n    ports: [vcnosuchport0]\n")
	deadline := time.Now().Add(time.Minute).Truncate(time.Second)
	netTestRecord(t, root, netcfg.Pending{Deadline: deadline}, "")
	// Should the refusal ever go, these must still leave the host alone
	// (this runs in its network namespace): each either changes only
	// files under root, or fails its own checks before any link changes.
	tests := [][]string{
		{"net", "apply", "-f", file},
		{"net", "apply", "-f", bad, "--try", "30s"},
		{"net", "bridge", "create", "vctestbr1", "--port", "vcnosuchport0"},
		{"net", "bridge", "delete", "vctestbr0"},
		{"net", "nat", "create", "other", "--subnet", "10.77.8.0/24", "--bridge", "bad/name"},
		{"net", "nat", "delete", "vctestnat"},
		{"net", "reset-dhcp", "vcnosuchnic0"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args[1:], " "), func(t *testing.T) {
			_, errOut, code := run(t, append(args, "--root", root)...)
			for _, want := range []string{"a network try is pending", "try " + netTestTryID, deadline.Local().Format(time.RFC3339), "`virt net confirm`", "`virt net rollback`"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q lacks %q", errOut, want)
				}
			}
			if code != ExitError {
				t.Errorf("exit %d; want %d", code, ExitError)
			}
		})
	}
	if b, _ := os.ReadFile(netcfg.DesiredFile(layout)); string(b) != desired {
		t.Errorf("network.yaml changed by refused commands:\n%s", b)
	}
	if b, _ := os.ReadFile(netcfg.AppliedFile(layout)); string(b) != netTestTrial {
		t.Errorf("applied.yaml changed by refused commands:\n%s", b)
	}
	for _, f := range []string{netcfg.DesiredPendingFile(layout), filepath.Join(root, "etc", "hostname")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s written by a refused command", f)
		}
	}
	if p, err := netcfg.PendingTry(layout); err != nil || p.ID != netTestTryID || p.RollbackError != "" {
		t.Errorf("pending try %+v, %v; want it untouched", p, err)
	}
	// a dry run changes nothing: allowed
	if _, errOut, code := run(t, "net", "apply", "-f", file, "--dry-run", "--root", root); code != ExitOK {
		t.Errorf("dry run during a try: exit %d (stderr %q); want %d", code, errOut, ExitOK)
	}
	// and status says the watchdog is not running, and what then happens
	out, _, code := run(t, "net", "status", "--root", root)
	if code != ExitOK || !strings.Contains(out, "its watchdog (pid 0) is not running") || !strings.Contains(out, "after the deadline rolls it back") {
		t.Errorf("net status (exit %d):\n%s\nwant the try with its watchdog not running", code, out)
	}
}

// An expired try whose watchdog is gone is rolled back by the next `virt
// net` command, which says so on stderr; `virt net rollback` does it as
// its own job.
func TestNetResolvesExpiredTry(t *testing.T) {
	const before = "# before the try\n"
	t.Run("status", func(t *testing.T) {
		root := t.TempDir()
		pid := netTestDeadPID(t)
		deadline := time.Now().Add(-2 * time.Second)
		netTestRecord(t, root, netcfg.Pending{Deadline: deadline, WatchdogPID: pid}, before)
		out, errOut, code := run(t, "net", "status", "--root", root)
		want := fmt.Sprintf("virt: network try %s expired at %s and its watchdog (pid %d) has exited: rolled it back", netTestTryID, deadline.Local().Format(time.TimeOnly), pid)
		if code != ExitOK || !strings.Contains(errOut, want) || !strings.Contains(out, "no network change pending") {
			t.Errorf("net status: exit %d, stdout %q, stderr %q; want %q on stderr and no change pending", code, out, errOut, want)
		}
		if b, _ := os.ReadFile(netcfg.AppliedFile(paths.New(root))); string(b) != before {
			t.Errorf("applied.yaml %q after the rollback; want %q", b, before)
		}
		if _, errOut, _ := run(t, "net", "status", "--root", root); errOut != "" {
			t.Errorf("second net status: stderr %q; want nothing (nothing left to roll back)", errOut)
		}
	})
	t.Run("confirm", func(t *testing.T) {
		root := t.TempDir()
		netTestRecord(t, root, netcfg.Pending{Deadline: time.Now().Add(-time.Second)}, before)
		_, errOut, code := run(t, "net", "confirm", "--root", root)
		if code != ExitError || !strings.Contains(errOut, "rolled it back") || !strings.Contains(errOut, "no network try is pending") {
			t.Errorf("net confirm: exit %d, stderr %q; want the rollback told, then nothing to confirm", code, errOut)
		}
	})
	t.Run("rollback", func(t *testing.T) {
		root := t.TempDir()
		netTestRecord(t, root, netcfg.Pending{Deadline: time.Now().Add(-time.Second)}, before)
		_, errOut, code := run(t, "net", "rollback", "--root", root)
		if code != ExitOK || strings.Contains(errOut, "expired") || !strings.Contains(errOut, "network configuration rolled back") {
			t.Errorf("net rollback: exit %d, stderr %q; want it rolled back by the command itself", code, errOut)
		}
		if b, _ := os.ReadFile(netcfg.AppliedFile(paths.New(root))); string(b) != before {
			t.Errorf("applied.yaml %q after the rollback; want %q", b, before)
		}
	})
	// a rollback that failed is not redone by every command that looks:
	// `virt net rollback` retries it, and the lines say so
	t.Run("rollback failed earlier", func(t *testing.T) {
		root := t.TempDir()
		netTestRecord(t, root, netcfg.Pending{Deadline: time.Now().Add(-time.Second), RollbackError: "restore: boom"}, before)
		out, errOut, code := run(t, "net", "status", "--root", root)
		if code != ExitOK || errOut != "" || !strings.Contains(out, "rolling back failed: restore: boom; run `virt net rollback` to retry") {
			t.Errorf("net status: exit %d, stdout %q, stderr %q; want the failed rollback shown, nothing redone", code, out, errOut)
		}
		file := filepath.Join(root, "new.yaml")
		writeNetFile(t, file, "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: plain\n")
		_, errOut, code = run(t, "net", "apply", "-f", file, "--root", root)
		if code != ExitError || !strings.Contains(errOut, "run `virt net rollback` to retry the rollback") || strings.Contains(errOut, "wait for it") {
			t.Errorf("net apply: exit %d, stderr %q; want a refusal naming `virt net rollback`, not a wait", code, errOut)
		}
		if b, _ := os.ReadFile(netcfg.AppliedFile(paths.New(root))); string(b) != netTestTrial {
			t.Errorf("applied.yaml %q; want the trial's, no rollback redone", b)
		}
		if p, err := netcfg.PendingTry(paths.New(root)); err != nil || p.RollbackError != "restore: boom" {
			t.Errorf("pending try %+v, %v; want it kept with its error", p, err)
		}
	})
	t.Run("before the deadline", func(t *testing.T) {
		root := t.TempDir()
		netTestRecord(t, root, netcfg.Pending{Deadline: time.Now().Add(time.Minute)}, before)
		if _, errOut, _ := run(t, "net", "status", "--root", root); errOut != "" {
			t.Errorf("net status: stderr %q; want nothing rolled back before the deadline", errOut)
		}
		if _, err := netcfg.PendingTry(paths.New(root)); err != nil {
			t.Errorf("pending try: %v; want it kept", err)
		}
	})
}

// `net apply --try` of a file the apply would refuse fails validation
// first, exit 2 naming the field: no pending record, no watchdog, no
// claim that a previous state was restored.
func TestNetApplyTryValidatesFirst(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	file := filepath.Join(root, "bad.yaml")
	writeNetFile(t, file, "apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vctestbr0\n    ports: [vcnosuchport0]\n")
	_, errOut, code := run(t, "net", "apply", "-f", file, "--try", "30s", "--root", root)
	if code != ExitUsage || !strings.Contains(errOut, "bridges[0].ports[0]") || !strings.Contains(errOut, "vcnosuchport0") || strings.Contains(errOut, "restored") {
		t.Errorf("exit %d, stderr %q; want exit %d naming bridges[0].ports[0], nothing restored", code, errOut, ExitUsage)
	}
	for _, f := range []string{netcfg.PendingPath(layout), filepath.Join(layout.LogDir(), "network-watchdog.log"), netcfg.DesiredPendingFile(layout)} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want it never written", f, err)
		}
	}
}

// A dry run of a change the default-route rule refuses shows its steps
// on stdout and the refusal on stderr, and exits as the apply would (2).
// It reads the host's own default route, and changes nothing.
func TestNetApplyDryRunRefused(t *testing.T) {
	st, err := netcfg.ReadState(context.Background())
	if err != nil {
		t.Skipf("cannot read the host's network: %v", err)
	}
	carriers := st.DefaultRouteLinks()
	if len(carriers) == 0 || st.Link(carriers[0]) == nil || st.Link(carriers[0]).Master != "" {
		t.Skipf("needs a host default route on a link that is no bridge port (have %v)", carriers)
	}
	root := t.TempDir()
	file := filepath.Join(root, "enslave.yaml")
	writeNetFile(t, file, fmt.Sprintf("apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: vctestdr0\n    ports: [%s]\n", carriers[0]))
	out, errOut, code := run(t, "net", "apply", "-f", file, "--dry-run", "--root", root)
	if code != ExitUsage || !strings.Contains(out, "vctestdr0") || !strings.Contains(out, "changes") {
		t.Errorf("dry run: exit %d, stdout %q; want exit %d and the plan", code, out, ExitUsage)
	}
	if !strings.Contains(errOut, "the apply would be refused") || !strings.Contains(errOut, "bridges[0].ports[0]") || !strings.Contains(errOut, "--try") {
		t.Errorf("dry run: stderr %q; want the refusal naming bridges[0].ports[0] and --try", errOut)
	}
	if after, err := netcfg.ReadState(context.Background()); err != nil || after.Link("vctestdr0") != nil {
		t.Errorf("a dry run created vctestdr0 (%v)", err)
	}
}
