package hostinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// devRoot makes a host root holding files (path relative to the root ->
// content; a trailing "/" makes a directory).
func devRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if strings.HasSuffix(rel, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func nodeByID(t *testing.T, id string) miscNode {
	t.Helper()
	for _, n := range miscNodes {
		if n.id == id {
			return n
		}
	}
	t.Fatalf("no misc node %s", id)
	return miscNode{}
}

// merge returns base with over's entries added; the value "\x00" in over
// deletes the entry.
func merge(base, over map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == "\x00" {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// TestDevNodeWithoutOpening: the tun/vhost checks judge a node by what the
// kernel publishes (/proc/misc, /proc/modules, /sys/module) and by the
// running kernel's module index, never by opening it (which would load
// the module and make the kernel print on the console).
func TestDevNodeWithoutOpening(t *testing.T) {
	t.Parallel()
	const rel = "6.1.0-27-amd64"
	// a modular kernel whose tun is installed but not loaded
	unloaded := map[string]string{
		"dev/net/tun":                      "",
		"dev/vhost-net":                    "",
		"proc/misc":                        "232 kvm\n237 loop-control\n",
		"proc/modules":                     "kvm_intel 380928 0 - Live 0x0\nkvm 1142784 1 kvm_intel, Live 0x0\n",
		"proc/sys/kernel/osrelease":        rel + "\n",
		"proc/sys/kernel/modules_disabled": "0\n",
		"lib/modules/" + rel + "/modules.alias": "alias devname:net/tun tun\nalias char-major-10-200 tun\n" +
			"alias devname:vhost-net vhost_net\nalias char-major-10-238 vhost_net\n",
	}
	tests := []struct {
		name   string
		id     string
		files  map[string]string
		want   Status
		detail string
	}{
		{name: "registered", id: "dev.tun", files: merge(unloaded, map[string]string{"proc/misc": "200 tun\n232 kvm\n"}),
			want: Pass, detail: "registered as tun"},
		{name: "not loaded, loads on first use", id: "dev.tun", files: unloaded,
			want: Pass, detail: "module tun not loaded; loads on first use"},
		{name: "vhost-net not loaded, loads on first use", id: "dev.vhost-net", files: unloaded,
			want: Pass, detail: "module vhost_net not loaded; loads on first use"},
		{name: "loaded, built in with parameters", id: "dev.tun",
			files: merge(unloaded, map[string]string{"sys/module/tun/": ""}),
			want:  Fail, detail: "tun is loaded, but misc minor 200 is not registered"},
		{name: "loaded as a module, not registered", id: "dev.vhost-net",
			files: merge(unloaded, map[string]string{"proc/modules": "vhost_net 32768 0 - Live 0x0\n"}),
			want:  Warn, detail: "vhost_net is loaded, but misc minor 238 is not registered"},
		{name: "not installed", id: "dev.tun",
			files: merge(unloaded, map[string]string{"lib/modules/" + rel + "/modules.alias": "alias char-major-10-238 vhost_net\n"}),
			want:  Fail, detail: "no alias char-major-10-200"},
		{name: "no module index for the running kernel", id: "dev.tun",
			files: merge(unloaded, map[string]string{"lib/modules/" + rel + "/modules.alias": "\x00", "lib/modules/" + rel + "/": ""}),
			want:  Fail, detail: "no module index"},
		{name: "module loading disabled", id: "dev.vhost-net",
			files: merge(unloaded, map[string]string{"proc/sys/kernel/modules_disabled": "1\n"}),
			want:  Warn, detail: "kernel.modules_disabled=1"},
		{name: "no module support", id: "dev.tun",
			files: merge(unloaded, map[string]string{"proc/modules": "\x00"}),
			want:  Fail, detail: "no module support"},
		{name: "monolithic kernel, built in", id: "dev.tun",
			files: merge(unloaded, map[string]string{"proc/modules": "\x00", "proc/misc": "200 tun\n"}),
			want:  Pass, detail: "registered as tun"},
		{name: "misc list unreadable", id: "dev.tun",
			files: merge(unloaded, map[string]string{"proc/misc": "\x00"}),
			want:  Unknown, detail: "registered misc devices are unreadable"},
		{name: "release unreadable", id: "dev.tun",
			files: merge(unloaded, map[string]string{"proc/sys/kernel/osrelease": "\x00"}),
			want:  Unknown, detail: "whether it loads on first use is unknown"},
		{name: "node missing", id: "dev.vhost-vsock", files: unloaded,
			want: Warn, detail: "does not exist"},
		{name: "node is a directory", id: "dev.tun",
			files: merge(unloaded, map[string]string{"dev/net/tun": "\x00", "dev/net/tun/": ""}),
			want:  Fail, detail: "is not a character device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := devRoot(t, tc.files)
			k := &checker{h: hostFS{root: root}, euid: 0}
			c := k.devNode(nodeByID(t, tc.id))
			if c.Status != tc.want || !strings.Contains(c.Detail, tc.detail) {
				t.Errorf("%s: got %s (%s); want %s with %q", tc.id, c.Status, c.Detail, tc.want, tc.detail)
			}
			if c.Status != Pass && c.Status != Unknown && c.Hint == "" {
				t.Errorf("%s: %s without a hint", tc.id, c.Status)
			}
		})
	}
}

// TestDevNodeCharDevice: a real node is judged by its type and number (a
// wrong number is not the device the check is about). It needs root to
// make device nodes.
func TestDevNodeCharDevice(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("making character device nodes (mknod) needs root")
	}
	tests := []struct {
		name         string
		major, minor uint32
		want         Status
		detail       string
	}{
		{name: "tun's number", major: 10, minor: 200, want: Pass, detail: "(char 10:200) registered as tun"},
		{name: "another misc device", major: 10, minor: 237, want: Fail, detail: "is char 10:237; want 10:200"},
		{name: "another major", major: 1, minor: 3, want: Fail, detail: "is char 1:3; want 10:200"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := devRoot(t, map[string]string{"proc/misc": "200 tun\n", "dev/net/": ""})
			p := filepath.Join(root, "dev/net/tun")
			if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(tc.major, tc.minor))); err != nil {
				t.Skipf("mknod %s: %v", p, err)
			}
			k := &checker{h: hostFS{root: root}, euid: 0}
			c := k.devNode(nodeByID(t, "dev.tun"))
			if c.Status != tc.want || !strings.Contains(c.Detail, tc.detail) {
				t.Errorf("got %s (%s); want %s with %q", c.Status, c.Detail, tc.want, tc.detail)
			}
		})
	}
}
