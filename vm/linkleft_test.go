package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkLeftovers builds, by hand, the source directories a linked
// clone killed -9 at each step leaves (see linkDisks), and checks what
// gc --dry-run lists, that gc then removes only what nothing reads and
// repairs the rest, and that the disk reads as it should after.
func TestLinkLeftovers(t *testing.T) {
	t.Parallel()
	const id = "0123abcd"
	type files struct{ disk, frozen, live string }
	link := func(t *testing.T, a, b string) {
		t.Helper()
		if err := os.Link(a, b); err != nil {
			t.Fatal(err)
		}
	}
	overlay := func(t *testing.T, m *Manager, backing, path string) {
		t.Helper()
		if out, err := exec.Command(m.opts.QEMUImg, "create", "-q", "-f", "qcow2", "-u", "-b", backing, "-F", "qcow2", path, "8M").CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create: %v: %s", err, out)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, m *Manager, f files)
		// listed: base name -> what the dry run says ("fix:" + its fix
		// words, or the start of its what)
		listed map[string]string
		// after gc: which names exist, the frozen layer's mode, and the
		// byte the disk reads at 0 and at 4M
		exist    []string
		gone     []string
		frozen   os.FileMode
		at0, at4 byte
	}{{
		name: "killed before the transaction (running source, since stopped)",
		setup: func(t *testing.T, m *Manager, f files) {
			link(t, f.disk, f.frozen)
			overlay(t, m, f.frozen, f.live)
			os.Chmod(f.live, 0o644)
		},
		listed: map[string]string{"frozen": "frozen layer left by an unfinished linked clone", "live": "unused overlay left by an unfinished linked clone"},
		exist:  []string{"disk"}, gone: []string{"frozen", "live"}, at0: 0x41, at4: 0,
	}, {
		name: "killed after the transaction, before the rename (the QEMU wrote the overlay, then ended)",
		setup: func(t *testing.T, m *Manager, f files) {
			link(t, f.disk, f.frozen)
			overlay(t, m, f.frozen, f.live)
			cloneIO(t, f.live, "write -P 0x43 4M 1M")
		},
		listed: map[string]string{"live": "fix:made it disk-root.qcow2 again"},
		exist:  []string{"disk", "frozen"}, gone: []string{"live"}, frozen: 0o444, at0: 0x41, at4: 0x43,
	}, {
		name: "killed after the rename, before the chmod",
		setup: func(t *testing.T, m *Manager, f files) {
			if err := os.Rename(f.disk, f.frozen); err != nil {
				t.Fatal(err)
			}
			os.Chmod(f.frozen, 0o600)
			overlay(t, m, f.frozen, f.live)
			link(t, f.live, f.disk)
		},
		listed: map[string]string{"frozen": "fix:mode 0600 -> 0444", "live": "a second name of disk-root.qcow2"},
		exist:  []string{"disk", "frozen"}, gone: []string{"live"}, frozen: 0o444, at0: 0x41, at4: 0,
	}, {
		name: "stopped source: killed after the disk was renamed, before its overlay",
		setup: func(t *testing.T, m *Manager, f files) {
			if err := os.Rename(f.disk, f.frozen); err != nil {
				t.Fatal(err)
			}
		},
		listed: map[string]string{"frozen": "fix:made it disk-root.qcow2 again"},
		exist:  []string{"disk"}, gone: []string{"frozen", "live"}, at0: 0x41, at4: 0,
	}, {
		name: "a finished linked clone's layer (nothing to do)",
		setup: func(t *testing.T, m *Manager, f files) {
			if err := os.Rename(f.disk, f.frozen); err != nil {
				t.Fatal(err)
			}
			os.Chmod(f.frozen, 0o444)
			overlay(t, m, f.frozen, f.disk)
		},
		listed: map[string]string{},
		exist:  []string{"disk", "frozen"}, gone: []string{"live"}, frozen: 0o444, at0: 0x41, at4: 0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := cloneManager(t)
			ctx := context.Background()
			src := cloneSource(t, m, "src")
			dir := m.layout().VMStateDir(src.Metadata.UID)
			f := files{disk: m.diskPath(src.Metadata.UID, "root"),
				frozen: filepath.Join(dir, "frozen-root-"+id+".qcow2"), live: filepath.Join(dir, "live-root-"+id+".qcow2")}
			byKey := map[string]string{"disk": f.disk, "frozen": f.frozen, "live": f.live}
			tc.setup(t, m, f)

			listed, err := m.GC(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, o := range listed {
				for k, p := range byKey {
					if o.Path == p {
						got[k] = o.What
						if o.Fix != "" {
							got[k] = "fix:" + o.Fix
						}
					}
				}
			}
			for k, want := range tc.listed {
				if !strings.HasPrefix(got[k], want) {
					t.Errorf("gc --dry-run: %s: got %q; want %q...", k, got[k], want)
				}
			}
			if len(got) != len(tc.listed) {
				t.Errorf("gc --dry-run listed %v; want exactly %v", got, tc.listed)
			}
			if _, err := m.GC(ctx, false); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.exist {
				if _, err := os.Stat(byKey[k]); err != nil {
					t.Errorf("after gc: %s: %v; want it there", k, err)
				}
			}
			for _, k := range tc.gone {
				if _, err := os.Lstat(byKey[k]); err == nil {
					t.Errorf("after gc: %s still there; want it gone", k)
				}
			}
			if tc.frozen != 0 {
				if fi, err := os.Stat(f.frozen); err == nil && fi.Mode().Perm() != tc.frozen {
					t.Errorf("after gc: frozen layer mode %v; want %v", fi.Mode().Perm(), tc.frozen)
				}
			}
			if !readsPattern(t, f.disk, tc.at0, "0", "1M") || !readsPattern(t, f.disk, tc.at4, "4M", "1M") {
				t.Errorf("after gc: the disk does not read %#x at 0 and %#x at 4M", tc.at0, tc.at4)
			}
			cloneImgCheck(t, f.disk)
			if again, err := m.GC(ctx, true); err != nil || len(again) != 0 {
				t.Errorf("second gc --dry-run: %v, %v; want nothing", again, err)
			}
		})
	}
}
