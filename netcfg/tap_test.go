package netcfg

import (
	"errors"
	"strings"
	"testing"
)

func TestTAPName(t *testing.T) {
	const uid = "0b3c6a4e-8f1d-4c2a-9e57-6d1f0a2b3c4d" // sha256 starts 2a1c6576
	tests := []struct {
		uid   string
		index int
		want  string
	}{
		{uid, 0, "vc2a1c65760"},
		{uid, 9, "vc2a1c65769"},
		{uid, 10, "vc2a1c6576a"},
		{uid, 0xFFFFF, "vc2a1c6576fffff"},
		{uid, 0x100000, "vc2a1c65760"}, // wraps
		{"", 0, "vce3b0c4420"},         // sha256("") starts e3b0c442
	}
	for _, tt := range tests {
		got := TAPName(tt.uid, tt.index)
		if got != tt.want {
			t.Errorf("TAPName(%q, %d) = %q; want %q", tt.uid, tt.index, got, tt.want)
		}
		if len(got) > 15 {
			t.Errorf("TAPName(%q, %d) = %q: %d bytes, over the kernel's 15", tt.uid, tt.index, got, len(got))
		}
		if err := tapCheckName(got); err != nil {
			t.Errorf("TAPName(%q, %d) = %q refused by CreateTAP: %v", tt.uid, tt.index, got, err)
		}
	}
	// Stable: the same inputs give the same name, every run.
	if a, b := TAPName(uid, 3), TAPName(uid, 3); a != b {
		t.Errorf("TAPName not stable: %q then %q", a, b)
	}
	// Within a VM, distinct indexes give distinct names.
	seen := map[string]int{}
	for i := 0; i < 4096; i++ {
		n := TAPName(uid, i)
		if j, dup := seen[n]; dup {
			t.Fatalf("TAPName(uid, %d) = TAPName(uid, %d) = %q", i, j, n)
		}
		seen[n] = i
	}
	// Different VMs: different prefixes.
	if TAPName(uid, 0) == TAPName(strings.Replace(uid, "0b3c", "0b3d", 1), 0) {
		t.Error("two uids share a TAP name")
	}
}

func TestTAPCheckName(t *testing.T) {
	for _, bad := range []string{"", "tap0", "vc0123456789abcd", "vc/x"} {
		if err := tapCheckName(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("tapCheckName(%q) = %v; want ErrInvalid", bad, err)
		}
	}
}
