package cli

import (
	"strings"
	"testing"

	"github.com/virtcon/virtcon/vm"
)

func TestWriteCgroup(t *testing.T) {
	unit, cpu, mem := "virtcon-vm-u1.scope", 12.5, uint64(256<<20)
	tests := []struct {
		name string
		c    *vm.CgroupStatus
		want []string
	}{
		{"stopped", nil, nil},
		{"in its scope", &vm.CgroupStatus{Path: "/virtcon.slice/" + unit, Unit: &unit, CPUSeconds: &cpu, MemoryBytes: &mem},
			[]string{"Scope:\tvirtcon-vm-u1.scope\n", "Cgroup:\t/virtcon.slice/virtcon-vm-u1.scope\n", "CPU time:\t12.5s\n", "Memory used:\t256.0MiB\n"}},
		{"no systemd", &vm.CgroupStatus{Path: "/"},
			[]string{"Scope:\tnone (no systemd scope)\n", "Cgroup:\t/\n", "CPU time:\t-\n", "Memory used:\t-\n"}},
	}
	for _, tt := range tests {
		var b strings.Builder
		writeCgroup(&b, tt.c)
		if got, want := b.String(), strings.Join(tt.want, ""); got != want {
			t.Errorf("%s: got %q; want %q", tt.name, got, want)
		}
	}
}
