package director

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// The admin socket is made under a temporary name and renamed into
// place, 0600, replacing what a killed director left (a stale socket, a
// temporary one).
func TestListenAdmin(t *testing.T) {
	dir, err := os.MkdirTemp("", "vda")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, AdminSocketName)
	for _, stale := range []string{path, filepath.Join(dir, adminTempName)} {
		if err := os.WriteFile(stale, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := listenAdmin(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("admin socket %s, want a 0600 socket", st.Mode())
	}
	if _, err := os.Lstat(filepath.Join(dir, adminTempName)); !os.IsNotExist(err) {
		t.Errorf("the temporary socket is left behind (lstat: %v)", err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the admin socket: %v", err)
	}
	c.Close()
}
