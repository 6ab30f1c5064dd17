package cli

import (
	"fmt"
	"io"

	"github.com/virtcon/virtcon/vm"
)

// writeCgroup is vm show's lines for a running VM's cgroup: its scope (or
// the unit it shares), the CPU time and memory its cgroup has used, "-"
// for what is unknown (a cgroup that is not the VM's own says nothing
// about the VM).
func writeCgroup(w io.Writer, c *vm.CgroupStatus) {
	if c == nil {
		return
	}
	unit := "none (no systemd scope)"
	if c.Unit != nil {
		unit = *c.Unit
	}
	fmt.Fprintf(w, "Scope:\t%s\nCgroup:\t%s\n", unit, c.Path)
	cpu, mem := "-", "-"
	if c.CPUSeconds != nil {
		cpu = fmt.Sprintf("%.1fs", *c.CPUSeconds)
	}
	if c.MemoryBytes != nil {
		mem = fmt.Sprintf("%.1fMiB", float64(*c.MemoryBytes)/(1<<20))
	}
	fmt.Fprintf(w, "CPU time:\t%s\nMemory used:\t%s\n", cpu, mem)
}
