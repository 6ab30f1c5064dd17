//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// guest holds the paths of the test guest built by `make guest`.
type guest struct {
	kernel, initrd, deaf string
	efiKernel            string // the bzImage: UEFI boots only an EFI-stub kernel
}

func requireGuest(t *testing.T) guest {
	t.Helper()
	testutil.RequireRoot(t, needsRoot)
	testutil.RequireCommand(t, "qemu-system-x86_64", "apt-get install qemu-system-x86")
	dir, _ := filepath.Abs(filepath.Join("..", "build", "guest"))
	if d := os.Getenv("GUEST_OUT"); d != "" { // a guest built elsewhere (GUEST_OUT=dir scripts/mkguest.sh)
		dir, _ = filepath.Abs(d)
	}
	g := guest{kernel: filepath.Join(dir, "vmlinuz"), initrd: filepath.Join(dir, "initrd.img"), deaf: filepath.Join(dir, "initrd-deaf.img"), efiKernel: filepath.Join(dir, "vmlinuz")}
	if fileExists(filepath.Join(dir, "vmlinux")) {
		g.kernel = filepath.Join(dir, "vmlinux") // uncompressed: boots in half the time under TCG
	}
	for _, p := range []string{g.kernel, g.initrd, g.deaf} {
		if !fileExists(p) {
			t.Skipf("test guest missing (%s): run `make guest`", p)
		}
	}
	return g
}

// vmRoot is a private virtcon root for one test; every QEMU started under
// it is killed when the test ends, whatever happened.
func vmRoot(t *testing.T) string {
	t.Helper()
	// short: unix socket paths under it must stay within 107 bytes
	root, err := os.MkdirTemp("/tmp", "vc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killUnder(root); os.RemoveAll(root) })
	return root
}

// qemuPIDsUnder lists live QEMU processes whose command line mentions dir.
func qemuPIDsUnder(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), "qemu-system") || !strings.Contains(string(b), dir) {
			continue
		}
		if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); strings.Contains(string(st), ") Z ") {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func killUnder(dir string) {
	for _, pid := range qemuPIDsUnder(dir) {
		syscall.Kill(pid, syscall.SIGCONT)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// v runs virt with --root and fails the test on a non-zero exit.
func v(t *testing.T, root string, args ...string) string {
	t.Helper()
	r := virt(t, nil, append([]string{"--root", root}, args...)...)
	if r.code != 0 {
		t.Fatalf("virt %s: exit %d\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func createGuest(t *testing.T, root, name, initrd string, start bool) string {
	t.Helper()
	g := requireGuest(t)
	args := []string{"vm", "create", name, "--kernel", g.kernel, "--initrd", initrd, "--memory", "256", "--cmdline", "console=ttyS0 quiet", "-o", "json"}
	if start {
		args = append(args, "--start")
	}
	var e vm.Entry
	if err := json.Unmarshal([]byte(v(t, root, args...)), &e); err != nil {
		t.Fatal(err)
	}
	return e.UID
}

func listVMs(t *testing.T, root string) map[string]vm.Entry {
	t.Helper()
	var entries []vm.Entry
	if err := json.Unmarshal([]byte(v(t, root, "vm", "list", "-o", "json")), &entries); err != nil {
		t.Fatal(err)
	}
	out := map[string]vm.Entry{}
	for _, e := range entries {
		if e.Class == vm.ClassManaged || e.Class == vm.ClassMissing {
			out[e.Name] = e
		}
	}
	return out
}

func entry(t *testing.T, root, name string) vm.Entry {
	t.Helper()
	e, ok := listVMs(t, root)[name]
	if !ok {
		t.Fatalf("vm %s not listed", name)
	}
	return e
}

func serialLog(root, uid string) string {
	b, _ := os.ReadFile(filepath.Join(root, "var/log/virtcon/vms", uid, "serial.log"))
	return string(b)
}

// waitLog waits for marker in the VM's serial log.
func waitLog(t *testing.T, root, uid, marker string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if strings.Contains(serialLog(root, uid), marker) {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %q in the serial log after %v; log:\n%s", marker, timeout, serialLog(root, uid))
	return 0
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(st), ") Z ")
}
