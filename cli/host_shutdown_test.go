package cli

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

func TestHostShutdownGuestsNothingRunning(t *testing.T) {
	root := t.TempDir()
	out, errOut, code := run(t, "host", "shutdown-guests", "--timeout", "20", "--parallel", "2", "-o", "json", "--root", root, "--host-root", fakehost.Tree(t, "intel-iommu"))
	if code != ExitOK {
		t.Fatalf("exit %d (%s); want 0", code, errOut)
	}
	var rep host.ShutdownReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not the report: %v\n%s", err, out)
	}
	if rep.Timeout.D() != 20*time.Second || rep.Parallel != 2 || rep.OnShutdown != host.OnShutdownShutdown || len(rep.Running) != 0 || rep.Finished == nil {
		t.Errorf("report %+v; want the flags' timeout and parallel, nothing running, finished", rep)
	}
	if !strings.Contains(errOut, "no VM was running") {
		t.Errorf("stderr %q; want the summary", errOut)
	}
	if rec, err := host.LoadShutdownRecord(paths.New(root)); err != nil || rec == nil {
		t.Errorf("shutdown record: %+v, %v; want one written", rec, err)
	}
}

func TestHostShutdownGuestsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--timeout", "0"}, {"--parallel", "0"}, {"--parallel", "-3"}, {"--parallel", "1000"}, {"--timeout", "soon"}} {
		root := t.TempDir()
		_, errOut, code := run(t, append([]string{"host", "shutdown-guests", "--root", root}, args...)...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d (%s); want %d", args, code, errOut, ExitUsage)
		}
		if !strings.Contains(errOut, args[0]) {
			t.Errorf("%v: stderr %q does not name the flag", args, errOut)
		}
		if _, err := os.Stat(host.ShutdownRecordFile(paths.New(root))); err == nil {
			t.Errorf("%v: refused, yet a shutdown record was written", args)
		}
	}
}

func TestShutdownWords(t *testing.T) {
	d := func(s float64) duration.Duration { return duration.Duration(time.Duration(s * float64(time.Second))) }
	rep := &host.ShutdownReport{
		ShutdownRecord: host.ShutdownRecord{OnShutdown: host.OnShutdownShutdown},
		Timeout:        d(10), Parallel: 4, Took: d(10.43),
		Outcomes: []host.ShutdownOutcome{
			{Name: "web-01", Outcome: host.ShutdownPoweredOff, Took: d(2.12)},
			{Name: "deaf", Outcome: host.ShutdownQuit, Took: d(10.2)},
			{Name: "db", Outcome: host.ShutdownFailed, Took: d(0.1), Error: "vm \"db\": stop: kill 7: operation not permitted"},
		},
	}
	want := "shutdown-guests (shutdown, 10s timeout, 4 at once): 3 VMs in 10.4s: 1 powered off by ACPI, 1 quit at the deadline, 1 FAILED"
	if got := shutdownSummary(rep); got != want {
		t.Errorf("summary:\n got %q\nwant %q", got, want)
	}
	var b strings.Builder
	if err := writeShutdownReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"NAME\tOUTCOME\tTOOK\tNOTE", "web-01\tpowered-off\t2.1s\t-", "deaf\tquit\t10.2s\t-", "db\tfailed\t100ms\tvm \"db\": stop: kill 7"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
}

// A saved state that cannot be resumed is worded with the flag that gets
// past it; the exit code stays an error's.
func TestWordSavedStateError(t *testing.T) {
	err := wordError(&vm.SavedStateError{Name: "web", Path: "/var/lib/virtcon/vms/u/saved.state", Reason: vm.SavedCorrupt, Detail: "sha256 a, saved b"})
	if !strings.Contains(err.Error(), "virt vm start --discard-saved web") || !errors.Is(err, vm.ErrSavedState) {
		t.Errorf("got %v; want the --discard-saved hint, still ErrSavedState", err)
	}
	if c := ExitCode(err); c != ExitError {
		t.Errorf("exit %d; want %d", c, ExitError)
	}
}
