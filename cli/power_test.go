package cli

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/power"
)

// fakePower replaces the real reboot/power-off for the test and records
// what was asked. No test in this package may reach power.Reboot.
func fakePower(t *testing.T) *[]power.Action {
	t.Helper()
	var got []power.Action
	old := hostPower
	hostPower = func(_ context.Context, _ *slog.Logger, a power.Action) error {
		got = append(got, a)
		return nil
	}
	t.Cleanup(func() { hostPower = old })
	return &got
}

func TestHostPowerRefusedWithoutYes(t *testing.T) {
	calls := fakePower(t)
	for _, verb := range []string{"reboot", "poweroff"} {
		t.Run(verb, func(t *testing.T) {
			out, errOut, code := run(t, "host", verb, "--root", t.TempDir(), "--host-root", fakehost.Tree(t, "intel-iommu"))
			if code != ExitUsage {
				t.Errorf("exit %d; want %d", code, ExitUsage)
			}
			if out != "" {
				t.Errorf("stdout %q; want nothing", out)
			}
			for _, want := range []string{"host " + verb, "--yes", "no VM is running"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q lacks %q", errOut, want)
				}
			}
		})
	}
	if len(*calls) != 0 {
		t.Errorf("power actions %v ran without --yes; want none", *calls)
	}
}

// TestHostPowerWithYes checks the wiring with the fake only.
func TestHostPowerWithYes(t *testing.T) {
	calls := fakePower(t)
	for _, verb := range []string{"reboot", "poweroff"} {
		if _, errOut, code := run(t, "host", verb, "--yes", "--root", t.TempDir(), "--host-root", fakehost.Tree(t, "intel-iommu")); code != 0 {
			t.Errorf("host %s --yes: exit %d (%s); want 0", verb, code, errOut)
		}
	}
	if len(*calls) != 2 || (*calls)[0] != power.ActionReboot || (*calls)[1] != power.ActionPowerOff {
		t.Errorf("power actions %v; want [reboot poweroff]", *calls)
	}
}

// The guests go down first (the shutdown record exists when the power
// action is asked), as host.yaml says, and the summary is on stderr.
func TestHostPowerShutsGuestsDownFirst(t *testing.T) {
	root := t.TempDir()
	recorded := false
	old := hostPower
	hostPower = func(context.Context, *slog.Logger, power.Action) error {
		_, err := os.Stat(host.ShutdownRecordFile(paths.New(root)))
		recorded = err == nil
		return nil
	}
	t.Cleanup(func() { hostPower = old })
	_, errOut, code := run(t, "host", "reboot", "--yes", "--root", root, "--host-root", fakehost.Tree(t, "intel-iommu"))
	if code != 0 {
		t.Fatalf("exit %d (%s)", code, errOut)
	}
	if !recorded {
		t.Error("the reboot was asked before shutdown-guests wrote its record")
	}
	if !strings.Contains(errOut, "shutdown-guests: no VM was running") {
		t.Errorf("stderr %q lacks the shutdown's summary", errOut)
	}
	if strings.Contains(errOut, "stopped hard") {
		t.Errorf("stderr %q still warns that VMs are stopped hard", errOut)
	}
}
