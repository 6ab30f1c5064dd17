package vm

import (
	"reflect"
	"testing"
)

func TestSplitOpts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", []string{""}},
		{"a", []string{"a"}},
		{"guest=web,debug-threads=on", []string{"guest=web", "debug-threads=on"}},
		{"a,,b", []string{"a,b"}},
		{"a,,,b", []string{"a,", "b"}},
		{"a,,,,b", []string{"a,,b"}},
		{",", []string{"", ""}},
		{",,", []string{","}},
		{"a,", []string{"a", ""}},
		{",a", []string{"", "a"}},
		{"x=1,y=2,z", []string{"x=1", "y=2", "z"}},
	}
	for _, tt := range tests {
		if got := splitOpts(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitOpts(%q): got %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestQemuName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{"libvirt style", []string{"qemu-system-x86_64", "-name", "guest=web,debug-threads=on"}, "web"},
		{"guest not first", []string{"qemu-system-x86_64", "-name", "debug-threads=on,guest=db"}, "db"},
		{"plain", []string{"qemu-system-x86_64", "-name", "foo"}, "foo"},
		{"implied with options", []string{"qemu-system-x86_64", "-name", "foo,debug-threads=on"}, "foo"},
		{"escaped comma", []string{"qemu-system-x86_64", "-name", "guest=a,,b,debug-threads=on"}, "a,b"},
		{"implied holding guest=", []string{"qemu-system-x86_64", "-name", "a,,guest=b"}, "a,guest=b"},
		{"implied holding =", []string{"qemu-system-x86_64", "-name", "a,,x=y,debug-threads=on"}, "a,x=y"},
		{"ours", Launch{Name: "x,debug-threads=off", UID: testUID}.Args(), "x,debug-threads=off"},
		{"no guest key", []string{"qemu-system-x86_64", "-name", "process=x"}, ""},
		{"no -name", []string{"qemu-system-x86_64", "-m", "512"}, ""},
		{"-name last", []string{"qemu-system-x86_64", "-name"}, ""},
	}
	for _, tt := range tests {
		if got := qemuName(tt.argv); got != tt.want {
			t.Errorf("%s: qemuName(%q): got %q; want %q", tt.name, tt.argv, got, tt.want)
		}
	}
}

func TestArgAccel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"qemu-system-x86_64", "-accel", "kvm"}, "kvm"},
		{[]string{"qemu-system-x86_64", "-accel", "tcg"}, "tcg"},
		{[]string{"qemu-system-x86_64", "-accel", "tcg,thread=multi"}, "tcg"},
		{[]string{"qemu-system-x86_64", "-machine", "pc,accel=kvm"}, "kvm"},
		{[]string{"qemu-system-x86_64", "-machine", "q35,accel=kvm:tcg"}, "kvm"},
		{[]string{"qemu-system-x86_64", "-machine", "q35,accel=tcg"}, "tcg"},
		{[]string{"qemu-system-x86_64", "-enable-kvm", "-m", "512"}, "kvm"},
		{[]string{"qemu-kvm", "-m", "512"}, "tcg"},
		{[]string{"qemu-system-x86_64"}, "tcg"},
		{Launch{Accel: "kvm"}.Args(), "kvm"},
		{Launch{Accel: "tcg"}.Args(), "tcg"},
	}
	for _, tt := range tests {
		if got := argAccel(tt.argv); got != tt.want {
			t.Errorf("argAccel(%q): got %q; want %q", tt.argv, got, tt.want)
		}
	}
}

func TestPhaseFromQMP(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"running": PhaseRunning, "paused": PhasePaused, "prelaunch": PhasePaused, "suspended": PhasePaused,
		"shutdown": PhaseShuttingDown, "guest-panicked": PhaseError, "internal-error": PhaseError, "io-error": PhaseError,
		"something-new": PhaseRunning,
	}
	for in, want := range tests {
		if got := phaseFromQMP(in); got != want {
			t.Errorf("phaseFromQMP(%q): got %q; want %q", in, got, want)
		}
	}
}
