package power

import (
	"fmt"
	"strings"

	"github.com/virtcon/virtcon/vm"
)

// Running returns the VMs with a live QEMU process (managed, orphaned or
// external alike): the ones a reboot or power-off kills.
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
// power-off: how many VMs run, up to max of their names, and that
// virtcon does not stop them. "" when none runs.
func Warning(running []vm.Entry, max int) string {
	if len(running) == 0 {
		return ""
	}
	names := make([]string, 0, min(len(running), max))
	for i, e := range running {
		if i == max {
			names = append(names, fmt.Sprintf("and %d more", len(running)-max))
			break
		}
		names = append(names, e.Name)
	}
	verb, pron := "VMs are", "they"
	if len(running) == 1 {
		verb, pron = "VM is", "it"
	}
	return fmt.Sprintf("%d %s running (%s); %s will be stopped hard when the host goes down (virtcon does not stop them for you)",
		len(running), verb, strings.Join(names, ", "), pron)
}
