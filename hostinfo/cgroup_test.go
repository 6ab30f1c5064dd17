package hostinfo

import (
	"path/filepath"
	"testing"
	"time"
)

func TestReadProcessCgroup(t *testing.T) {
	const scope = "virtcon-vm-5f0c8a36-6b1e-4a5e-9d1c-0b6a4f1e2d3c.scope"
	dur := func(d time.Duration) *time.Duration { return &d }
	bytes := func(b uint64) *uint64 { return &b }
	tests := []struct {
		fixture, path, unit string
		cpu                 *time.Duration
		mem                 *uint64
	}{
		// systemd on cgroup v2: cpu.stat and memory.current of the scope
		{"v2-scope", "/virtcon.slice/" + scope, scope, dur(12500 * time.Millisecond), bytes(256 << 20)},
		// hybrid: the v1 cpuacct and memory controllers' files
		{"hybrid-scope", "/virtcon.slice/" + scope, scope, dur(3 * time.Second), bytes(128 << 20)},
		// the QEMU shares the DCUI's unit: that unit's numbers are not the VM's
		{"shared-unit", "/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service", nil, nil},
		// no systemd: the root cgroup, the whole host's numbers
		{"no-systemd", "/", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			got, err := ReadProcessCgroup(filepath.Join("testdata", "cgroups", tt.fixture), 4242)
			if err != nil {
				t.Fatalf("ReadProcessCgroup: %v", err)
			}
			if got.Path != tt.path || got.Unit != tt.unit {
				t.Errorf("path, unit: got %q, %q; want %q, %q", got.Path, got.Unit, tt.path, tt.unit)
			}
			if !eqPtr(got.CPU, tt.cpu) {
				t.Errorf("cpu: got %v; want %v", deref(got.CPU), deref(tt.cpu))
			}
			if !eqPtr(got.MemoryBytes, tt.mem) {
				t.Errorf("memory: got %v; want %v", deref(got.MemoryBytes), deref(tt.mem))
			}
		})
	}
}

func TestReadProcessCgroupGone(t *testing.T) {
	if _, err := ReadProcessCgroup(filepath.Join("testdata", "cgroups", "v2-scope"), 4243); err == nil {
		t.Errorf("ReadProcessCgroup of a pid without /proc entry: got no error")
	}
}

func TestUnitOf(t *testing.T) {
	for in, want := range map[string]string{
		"/virtcon.slice/virtcon-vm-x.scope":           "virtcon-vm-x.scope",
		"/system.slice/ssh.service/session-1.scope":   "session-1.scope",
		"/system.slice/virtcon-guests.service":        "virtcon-guests.service",
		"/user.slice/user-1000.slice":                 "",
		"/":                                           "",
		"/system.slice/docker-abc.scope/init.scope/x": "init.scope",
	} {
		if got := unitOf(in); got != want {
			t.Errorf("unitOf(%q): got %q; want %q", in, got, want)
		}
	}
}

func eqPtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func deref[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}
