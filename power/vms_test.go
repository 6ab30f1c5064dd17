package power

import (
	"testing"

	"github.com/virtcon/virtcon/vm"
)

func TestRunningAndWarning(t *testing.T) {
	entries := []vm.Entry{
		{Name: "web-01", Class: vm.ClassManaged, Phase: vm.PhaseRunning, PID: 10},
		{Name: "build", Class: vm.ClassManaged, Phase: vm.PhaseStopped},
		{Name: "db-01", Class: vm.ClassManaged, Phase: vm.PhasePaused, PID: 11},
		{Name: "legacy", Class: vm.ClassExternal, Phase: vm.PhaseRunning, PID: 12},
		{Name: "gone", Class: vm.ClassMissing, Phase: vm.PhaseStopped},
	}
	run := Running(entries)
	if len(run) != 3 {
		t.Fatalf("Running = %d VMs; want 3 (every live QEMU process)", len(run))
	}
	const plan = "shut down first (the ACPI power button, then quit after 5m0s)"
	tests := []struct {
		vms  []vm.Entry
		max  int
		want string
	}{
		{nil, 5, ""},
		{run[:1], 5, "1 VM is running (web-01); it will be shut down first (the ACPI power button, then quit after 5m0s)"},
		{run[:2], 5, "2 VMs are running (web-01, db-01); they will be shut down first (the ACPI power button, then quit after 5m0s)"},
		{run, 5, "3 VMs are running (web-01, db-01, legacy); virtcon's 2 will be shut down first (the ACPI power button, then quit after 5m0s); the 1 it does not manage will be stopped hard when the host goes down"},
		{run, 2, "3 VMs are running (web-01, db-01, and 1 more); virtcon's 2 will be shut down first (the ACPI power button, then quit after 5m0s); the 1 it does not manage will be stopped hard when the host goes down"},
		{run[2:], 5, "1 VM is running (legacy); virtcon does not manage it: it will be stopped hard when the host goes down"},
	}
	for _, tc := range tests {
		if got := Warning(tc.vms, tc.max, plan); got != tc.want {
			t.Errorf("Warning(%d VMs, %d) = %q; want %q", len(tc.vms), tc.max, got, tc.want)
		}
	}
}
