package power

import (
	"testing"

	"github.com/virtcon/virtcon/vm"
)

func TestRunningAndWarning(t *testing.T) {
	entries := []vm.Entry{
		{Name: "web-01", Phase: vm.PhaseRunning, PID: 10},
		{Name: "build", Phase: vm.PhaseStopped},
		{Name: "db-01", Phase: vm.PhasePaused, PID: 11},
		{Name: "legacy", Class: vm.ClassExternal, Phase: vm.PhaseRunning, PID: 12},
		{Name: "gone", Class: vm.ClassMissing, Phase: vm.PhaseStopped},
	}
	run := Running(entries)
	if len(run) != 3 {
		t.Fatalf("Running = %d VMs; want 3 (every live QEMU process)", len(run))
	}
	tests := []struct {
		vms  []vm.Entry
		max  int
		want string
	}{
		{nil, 5, ""},
		{run[:1], 5, "1 VM is running (web-01); it will be stopped hard when the host goes down (virtcon does not stop them for you)"},
		{run, 5, "3 VMs are running (web-01, db-01, legacy); they will be stopped hard when the host goes down (virtcon does not stop them for you)"},
		{run, 2, "3 VMs are running (web-01, db-01, and 1 more); they will be stopped hard when the host goes down (virtcon does not stop them for you)"},
	}
	for _, tc := range tests {
		if got := Warning(tc.vms, tc.max); got != tc.want {
			t.Errorf("Warning(%d VMs, %d) = %q; want %q", len(tc.vms), tc.max, got, tc.want)
		}
	}
}
