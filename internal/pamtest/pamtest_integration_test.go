//go:build integration

package pamtest

import (
	"bytes"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

// TestHelpersIntegration checks that the helpers make what they say and
// that their cleanups remove it.
func TestHelpersIntegration(t *testing.T) {
	RequireRootPAM(t)
	var service, group, name string
	t.Run("create", func(t *testing.T) {
		service = InstallService(t)
		got, err := os.ReadFile(filepath.Join(pamDir, service))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(testutil.RepoRoot(t), ServiceSource))
		if !bytes.Equal(got, want) {
			t.Errorf("installed service %s differs from %s", service, ServiceSource)
		}

		group = CreateGroup(t)
		name = CreateUser(t, "pw with spaces:and colons", group)
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		gids, _ := u.GroupIds()
		g, err := user.LookupGroup(group)
		if err != nil || !slices.Contains(gids, g.Gid) {
			t.Errorf("user %s groups %v; want %s (%v)", name, gids, group, err)
		}
		if u.HomeDir != "" {
			if _, err := os.Stat(u.HomeDir); err == nil && strings.Contains(u.HomeDir, name) {
				t.Errorf("home directory %s created; want none (-M)", u.HomeDir)
			}
		}
		if hash := shadowField(t, name, 1); !strings.HasPrefix(hash, "$") {
			t.Errorf("shadow password field %q; want a hash", hash)
		}
		ExpireAccount(t, name)
		if exp := shadowField(t, name, 7); exp != "1" {
			t.Errorf("shadow expiry field %q; want 1", exp)
		}
	})
	if _, err := os.Stat(filepath.Join(pamDir, service)); !os.IsNotExist(err) {
		t.Errorf("service %s still installed after cleanup (%v)", service, err)
	}
	if _, err := user.Lookup(name); err == nil {
		t.Errorf("user %s still exists after cleanup", name)
	}
	if _, err := user.LookupGroup(group); err == nil {
		t.Errorf("group %s still exists after cleanup", group)
	}
}

func shadowField(t *testing.T, name string, field int) string {
	t.Helper()
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if f[0] == name && len(f) > field {
			return f[field]
		}
	}
	t.Fatalf("%s not in /etc/shadow", name)
	return ""
}
