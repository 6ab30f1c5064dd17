package hostinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScopesCheck(t *testing.T) {
	tests := []struct {
		name   string
		files  []string // made under the root; a trailing / is a directory
		want   Status
		detail string
	}{
		{"no systemd", nil, Warn, "systemd is not PID 1"},
		{"systemd, private socket", []string{"run/systemd/system/", "run/systemd/private"}, Pass, "/run/systemd/private"},
		{"systemd, system bus only", []string{"run/systemd/system/", "run/dbus/system_bus_socket"}, Pass, "/run/dbus/system_bus_socket"},
		{"systemd, no manager to reach", []string{"run/systemd/system/"}, Fail, "VM starts are refused"},
		// a leftover run/systemd of a systemd that is not PID 1 (this build machine)
		{"run/systemd without system", []string{"run/systemd/machines/", "run/systemd/private"}, Warn, "systemd is not PID 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tt.files {
				p := filepath.Join(root, f)
				if strings.HasSuffix(f, "/") {
					os.MkdirAll(p, 0o755)
					continue
				}
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, nil, 0o600)
			}
			k := &checker{h: hostFS{root: root}}
			c := k.scopes()
			if c.ID != "vm.scopes" || c.Status != tt.want || !strings.Contains(c.Detail, tt.detail) {
				t.Errorf("got %s %s (%s); want vm.scopes %s with %q", c.ID, c.Status, c.Detail, tt.want, tt.detail)
			}
			if c.Status != Pass && c.Hint == "" {
				t.Errorf("%s without a hint", c.Status)
			}
		})
	}
}
