package power

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// These tests only choose commands; nothing here ever runs one.

func TestCommand(t *testing.T) {
	systemd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(systemd, "run", "systemd", "system"), 0o755); err != nil {
		t.Fatal(err)
	}
	sysv := t.TempDir()
	// a file where the directory should be is not systemd
	notDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(notDir, "run", "systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notDir, "run", "systemd", "system"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	onPath := func(have ...string) func(string) (string, error) {
		return func(p string) (string, error) {
			if slices.Contains(have, p) {
				return "/usr/sbin/" + p, nil
			}
			return "", exec.ErrNotFound
		}
	}
	all := onPath("systemctl", "reboot", "poweroff")
	tests := []struct {
		name   string
		action Action
		root   string
		look   func(string) (string, error)
		want   string // argv joined; "" for an error
	}{
		{"systemd reboot", ActionReboot, systemd, all, "/usr/sbin/systemctl reboot"},
		{"systemd poweroff", ActionPowerOff, systemd, all, "/usr/sbin/systemctl poweroff"},
		{"sysv reboot", ActionReboot, sysv, all, "/usr/sbin/reboot"},
		{"sysv poweroff", ActionPowerOff, sysv, all, "/usr/sbin/poweroff"},
		{"run/systemd/system is a file", ActionReboot, notDir, all, "/usr/sbin/reboot"},
		{"systemd without systemctl", ActionReboot, systemd, onPath("reboot"), ""},
		{"sysv without poweroff", ActionPowerOff, sysv, onPath("systemctl", "reboot"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := Command(tc.action, tc.root, tc.look)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrNoCommand) || !errors.Is(err, exec.ErrNotFound) {
					t.Fatalf("Command = %q, %v; want ErrNoCommand wrapping the lookup error", argv, err)
				}
				if !strings.Contains(err.Error(), tc.action.String()) {
					t.Errorf("error %q does not name the action", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(argv, " "); got != tc.want {
				t.Errorf("Command = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestActionString(t *testing.T) {
	if ActionReboot.String() != "reboot" || ActionPowerOff.String() != "poweroff" {
		t.Errorf("verbs %q, %q; want reboot, poweroff", ActionReboot, ActionPowerOff)
	}
}
