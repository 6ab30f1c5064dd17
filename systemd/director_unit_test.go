package systemd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

// The director's unit keeps its state (etcd, the CA and its KEK, the
// admin socket) in a 0700 state directory, is not a oneshot, and is
// left for the admin to enable (it has an [Install] section but the
// package enables nothing but virtcon-guests).
func TestDirectorUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "packaging", "systemd", "virtcon-director.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"ExecStart=/usr/local/bin/virt-director serve\n",
		"StateDirectory=virtcon-director\n",
		"StateDirectoryMode=0700\n",
		"Restart=on-failure\n",
		"WantedBy=multi-user.target\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("virtcon-director.service lacks %q", strings.TrimSpace(want))
		}
	}
}
