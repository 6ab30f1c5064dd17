package power

import (
	"fmt"
	"strings"

	"github.com/virtcon/virtcon/vm"
)

// Running returns the VMs with a live QEMU process (managed, orphaned or
// external alike): the ones a reboot or power-off takes down.
func Running(vms []vm.Entry) []vm.Entry {
	var out []vm.Entry
	for _, e := range vms {
		if e.PID > 0 {
			out = append(out, e)
		}
	}
	return out
}

// Warning is the sentence the CLI and the DCUI show before a reboot or
// power-off: how many VMs run, up to max of their names, and what becomes
// of them. virtcon's own are taken down first as plan says (the host
// policy's, worded by host.Policy.ShutdownPlan: "shut down first (…)");
// guests it does not manage die with the host. "" when none runs.
func Warning(running []vm.Entry, max int, plan string) string {
	if len(running) == 0 {
		return ""
	}
	names := make([]string, 0, min(len(running), max))
	ours := 0
	for i, e := range running {
		if e.Class == vm.ClassManaged {
			ours++
		}
		if i == max {
			names = append(names, fmt.Sprintf("and %d more", len(running)-max))
			continue
		}
		if i < max {
			names = append(names, e.Name)
		}
	}
	verb, pron := "VMs are", "they"
	if len(running) == 1 {
		verb, pron = "VM is", "it"
	}
	head := fmt.Sprintf("%d %s running (%s)", len(running), verb, strings.Join(names, ", "))
	foreign := len(running) - ours
	switch {
	case foreign == 0:
		return fmt.Sprintf("%s; %s will be %s", head, pron, plan)
	case ours == 0:
		return fmt.Sprintf("%s; virtcon does not manage %s: %s will be stopped hard when the host goes down", head, map[bool]string{true: "it", false: "them"}[foreign == 1], pron)
	}
	return fmt.Sprintf("%s; virtcon's %d will be %s; the %d it does not manage will be stopped hard when the host goes down", head, ours, plan, foreign)
}
