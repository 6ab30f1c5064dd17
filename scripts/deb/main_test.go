package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/netcfg"
)

func TestDebianVersion(t *testing.T) {
	tests := []struct{ in, want string }{
		{"v0.1.0", "0.1.0"},
		{"v0.1.0-3-gabc1234", "0.1.0+3+gabc1234"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		// no tag: a commit, below every release, even one that starts with a digit
		{"b0fc125", "0~git.b0fc125"},
		{"190a0a7-dirty", "0~git.190a0a7+dirty"},
	}
	for _, tt := range tests {
		if got, err := DebianVersion(tt.in); err != nil || got != tt.want {
			t.Errorf("DebianVersion(%q): got %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "v", "1.0_beta", "1.0:2"} {
		if got, err := DebianVersion(bad); err == nil {
			t.Errorf("DebianVersion(%q): got %q; want an error", bad, got)
		}
	}
}

// The examples shipped as conffiles are valid files of their kind.
func TestShippedExamples(t *testing.T) {
	root := testutil.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "packaging", "etc", "network.yaml.example"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := netcfg.Decode(b); err != nil {
		t.Errorf("packaging/etc/network.yaml.example: %v", err)
	}
	b, err = os.ReadFile(filepath.Join(root, "packaging", "etc", "host.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.DecodePolicy(b); err != nil {
		t.Errorf("packaging/etc/host.yaml: %v", err)
	}
}

func TestUnitPaths(t *testing.T) {
	in := "ExecStart=/usr/local/bin/virt host boot\nDocumentation=file:///usr/local/share/doc/virtcon/dcui.md\n"
	want := "ExecStart=/usr/bin/virt host boot\nDocumentation=file:///usr/share/doc/virtcon/dcui.md\n"
	if got := string(unitPaths([]byte(in))); got != want {
		t.Errorf("unitPaths: got %q; want %q", got, want)
	}
}
