package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

// TestUnitsVerify runs systemd-analyze verify on every unit file under
// packaging/systemd (the template as an instance, the getty drop-in on
// getty@tty1.service), with their programs pointing at stand-ins: any
// word from it (an unknown key, a bad value, a missing program, a
// dependency that does not load) fails. It needs no running systemd.
func TestUnitsVerify(t *testing.T) {
	analyze := testutil.RequireCommand(t, "systemd-analyze", "apt-get install systemd")
	src := filepath.Join(testutil.RepoRoot(t), "packaging", "systemd")
	dir, bin := t.TempDir(), t.TempDir()
	for _, prog := range []string{"virt", "dcui", "virt-director"} {
		if err := os.WriteFile(filepath.Join(bin, prog), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var units []string
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "ExecStart=") && !strings.Contains(string(b), "/usr/local/bin/") {
			t.Errorf("%s: names no program under /usr/local/bin (make install's; the .deb rewrites it to /usr/bin)", rel)
		}
		out := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(out), 0o755)
		if err := os.WriteFile(out, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/", bin+"/")), 0o644); err != nil {
			return err
		}
		switch name := filepath.Base(rel); {
		case strings.HasSuffix(filepath.Dir(rel), ".d"):
			units = append(units, strings.TrimSuffix(filepath.Dir(rel), ".d")) // a drop-in: verify what it changes
		case strings.HasSuffix(name, "@.service"):
			units = append(units, strings.TrimSuffix(name, "@.service")+"@ttyS0.service")
		default:
			units = append(units, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{Slice, GuestsService, "getty@tty1.service", "virtcon-dcui-serial@ttyS0.service"} {
		if !containsString(units, want) {
			t.Errorf("packaging/systemd has no %s (units: %v)", want, units)
		}
	}
	for _, u := range units {
		cmd := exec.Command(analyze, "verify", u)
		// the copies first, then systemd's own directories (the trailing ':')
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":", "SYSTEMD_LOG_LEVEL=notice")
		out, err := cmd.CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
}

// The guests' unit stops the guests before systemd stops the scopes:
// its ExecStop is shutdown-guests, and it is a oneshot that stays active
// (a stop runs only for an active unit), also when `virt host boot`
// exits non-zero (the "-").
func TestGuestsUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "packaging", "systemd", GuestsService))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=oneshot", "RemainAfterExit=yes", "ExecStart=-/usr/local/bin/virt --log-level info host boot",
		"ExecStop=/usr/local/bin/virt host shutdown-guests", "TimeoutStopSec=infinity", "After=" + Slice,
		// the network daemons the boot started survive a restart of the unit
		"KillMode=process"} {
		if !strings.Contains(string(b), "\n"+want) {
			t.Errorf("%s lacks %q", GuestsService, want)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// The agent's unit runs `virt agent run` once enrolled, is not restarted
// after exit 5 (credential revoked or expired: re-enrol), and a stop
// signals virt alone.
func TestAgentUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "packaging", "systemd", "virtcon-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/virt agent run", "Restart=on-failure", "RestartPreventExitStatus=5",
		"KillMode=process", "After=network-online.target", "Wants=network-online.target",
		"ConditionPathExists=/etc/virtcon/agent/identity.pem", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(b), "\n"+want+"\n") {
			t.Errorf("virtcon-agent.service lacks %q", want)
		}
	}
}
