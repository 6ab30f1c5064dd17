//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
)

// TestIntegrationSystemdShutdownOrder boots a real systemd as PID 1 of
// its own PID, mount, cgroup, UTS, IPC and network namespaces (the build
// machines run no systemd; this one sees only the units the test gives
// it), with the packaged virtcon-guests.service and virtcon.slice. Then:
// the unit's start (virt host boot) puts the autostart guests into their
// own scopes under virtcon.slice; a VM started from a stand-in console
// unit survives that unit's stop; and at power-off, systemd runs the
// unit's stop (virt host shutdown-guests) while every QEMU still runs:
// each guest powers off by ACPI (its console says VIRTCON-POWEROFF)
// instead of its QEMU getting the scope's SIGTERM.
func TestIntegrationSystemdShutdownOrder(t *testing.T) {
	g := requireGuest(t)
	sd := "/lib/systemd/systemd"
	if !fileExists(sd) {
		t.Skipf("%s missing: apt-get install systemd", sd)
	}
	for _, c := range []string{"unshare", "nsenter"} {
		testutil.RequireCommand(t, c, "apt-get install util-linux")
	}
	if fileExists("/run/systemd/system") {
		t.Skip("systemd is PID 1 here: this test boots its own in namespaces, for machines without one")
	}
	root := vmRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// the guests: two started by the boot, one by a "console"
	for _, v := range []struct {
		name string
		args []string
	}{{"g1", []string{"--autostart", "--startup-order", "1"}}, {"g2", []string{"--autostart", "--startup-order", "2"}}, {"c1", nil}} {
		args := append([]string{"--root", root, "vm", "create", v.name, "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "128", "--accel", "tcg"}, v.args...)
		if r := virt(t, nil, args...); r.code != 0 {
			t.Fatalf("vm create %s: exit %d: %s", v.name, r.code, r.stderr)
		}
	}
	write(t, filepath.Join(root, "etc", "virtcon", "host.yaml"), "apiVersion: virtcon/v1\nkind: HostPolicy\nonShutdown: shutdown\nshutdownTimeout: 40s\n")

	units := sdUnits(t, root)
	ns := bootSystemd(t, ctx, root, units)

	// the boot: virtcon-guests.service active, g1 and g2 in their scopes
	sdWait(t, 90*time.Second, "virtcon-guests.service active", func() bool {
		out, _ := ns.run(ctx, "systemctl", "is-active", "virtcon-guests.service")
		return strings.TrimSpace(out) == "active"
	}, ns.consoleTail)
	uids := map[string]string{}
	for _, name := range []string{"g1", "g2"} {
		out, err := ns.run(ctx, virtBin, "--root", root, "vm", "show", name, "-o", "json")
		if err != nil {
			t.Fatalf("vm show %s: %v\n%s", name, err, out)
		}
		var v struct {
			Metadata struct{ UID string }
			Status   struct {
				Cgroup *struct {
					Path        string
					Unit        *string
					CPUSeconds  *float64
					MemoryBytes *uint64
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("vm show %s: %v\n%s", name, err, out)
		}
		uids[name] = v.Metadata.UID
		scope := "virtcon-vm-" + v.Metadata.UID + ".scope"
		c := v.Status.Cgroup
		if c == nil || c.Unit == nil || *c.Unit != scope || !strings.HasSuffix(c.Path, "/virtcon.slice/"+scope) {
			t.Errorf("vm show %s: status.cgroup %s; want unit %s under virtcon.slice", name, jsonOf(c), scope)
		} else if c.CPUSeconds == nil || c.MemoryBytes == nil {
			t.Errorf("vm show %s: status.cgroup %s; want the scope's CPU time and memory", name, jsonOf(c))
		}
		if out, _ := ns.run(ctx, "systemctl", "is-active", scope); strings.TrimSpace(out) != "active" {
			t.Errorf("%s: %q; want active", scope, out)
		}
	}

	// a console unit starts c1, then stops (KillMode=control-group, the
	// default): c1 lives on in its own scope
	if out, err := ns.run(ctx, "systemd-run", "--unit=fake-console.service", "--service-type=oneshot", "--remain-after-exit",
		"--setenv=VIRTCON_ROOT="+root, virtBin, "vm", "start", "c1"); err != nil {
		t.Fatalf("systemd-run vm start c1: %v\n%s", err, out)
	}
	if out, err := ns.run(ctx, "systemctl", "stop", "fake-console.service"); err != nil {
		t.Fatalf("systemctl stop fake-console.service: %v\n%s", err, out)
	}
	time.Sleep(500 * time.Millisecond)
	if out, err := ns.run(ctx, virtBin, "--root", root, "vm", "show", "c1", "-o", "json"); err != nil || !strings.Contains(out, `"phase": "Running"`) {
		t.Fatalf("c1 after its console unit stopped: %v\n%s\nwant it running in its own scope", err, out)
	}

	// the guests answer the power button once their init is up
	for _, name := range []string{"g1", "g2", "c1"} {
		sdWait(t, 90*time.Second, name+" ready", func() bool {
			return strings.Contains(serialLogOf(t, root, name), "VIRTCON-GUEST-READY")
		}, ns.consoleTail)
	}

	// power-off
	if out, err := ns.run(ctx, "systemctl", "poweroff"); err != nil && !strings.Contains(out, "Failed to connect") {
		t.Fatalf("systemctl poweroff: %v\n%s", err, out)
	}
	select {
	case <-ns.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("systemd did not power off within 2m; console:\n%s", ns.consoleTail())
	}
	console := ns.console()
	t.Logf("virtcon-guests.service output:\n%s", readFile(filepath.Join(root, "guests.log")))
	for _, name := range []string{"g1", "g2", "c1"} {
		if log := serialLogOf(t, root, name); !strings.Contains(log, "VIRTCON-POWEROFF") {
			t.Errorf("%s: its console never said VIRTCON-POWEROFF: systemd stopped its QEMU before shutdown-guests powered it off\nconsole of systemd:\n%s", name, console)
		}
	}
	// systemd never had to stop a scope with a QEMU in it
	if strings.Contains(console, "Stopping virtcon-vm-") {
		t.Errorf("systemd stopped a VM's scope itself (its QEMU got SIGTERM); console:\n%s", console)
	}
	stopped := strings.Index(console, "Stopped virtcon-guests.service")
	if stopped < 0 {
		t.Errorf("systemd's log has no stop of virtcon-guests.service:\n%s", console)
	}
	// each scope went inactive (its QEMU gone) before the unit's stop ended
	for name, uid := range uids {
		if i := strings.Index(console, "virtcon-vm-"+uid+".scope: Deactivated successfully"); i < 0 || i > stopped {
			t.Errorf("%s's scope: deactivated at %d, virtcon-guests.service stopped at %d; want the scope gone first\n%s", name, i, stopped, console)
		}
	}
	if len(qemuPIDsUnder(root)) != 0 {
		t.Errorf("QEMUs still running after the power-off: %v", qemuPIDsUnder(root))
	}
}

// sdUnits is the unit directory the namespace's systemd sees and no
// other: the packaged units with virt at the test's binary and a drop-in
// for the test's root and output, the targets they name as stubs, and
// the real power-off path.
func sdUnits(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, "units")
	src := filepath.Join(testutil.RepoRoot(t), "packaging", "systemd")
	for _, u := range []string{"virtcon-guests.service", "virtcon.slice"} {
		b, err := os.ReadFile(filepath.Join(src, u))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, u), strings.ReplaceAll(string(b), "/usr/local/bin/virt", virtBin))
	}
	write(t, filepath.Join(dir, "virtcon-guests.service.d", "test.conf"), fmt.Sprintf(
		"[Service]\nEnvironment=VIRTCON_ROOT=%s\nStandardOutput=append:%s/guests.log\nStandardError=append:%s/guests.log\n", root, root, root))
	for _, stub := range []string{"sysinit.target", "basic.target", "network.target", "remote-fs.target", "time-sync.target",
		"slices.target", "multi-user.target", "sockets.target"} {
		write(t, filepath.Join(dir, stub), "[Unit]\nDescription=stub "+stub+"\nDefaultDependencies=no\n")
	}
	write(t, filepath.Join(dir, "virtcon-test.target"), "[Unit]\nDescription=virtcon test\nDefaultDependencies=no\nWants=virtcon-guests.service\n")
	for _, u := range []string{"poweroff.target", "systemd-poweroff.service", "shutdown.target", "umount.target", "final.target"} {
		b, err := os.ReadFile(filepath.Join("/lib/systemd/system", u))
		if err != nil {
			t.Skipf("systemd's %s: %v", u, err)
		}
		write(t, filepath.Join(dir, u), string(b))
	}
	return dir
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func serialLogOf(t *testing.T, root, name string) string {
	t.Helper()
	r := virt(t, nil, "--root", root, "vm", "show", name, "-o", "json")
	var v struct{ Metadata struct{ UID string } }
	json.Unmarshal([]byte(r.stdout), &v)
	return readFile(filepath.Join(root, "var", "log", "virtcon", "vms", v.Metadata.UID, "serial.log"))
}

func sdWait(t *testing.T, d time.Duration, what string, ok func() bool, context func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; systemd's console:\n%s", what, d, context())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nsSystemd is a systemd running as PID 1 of the test's namespaces.
type nsSystemd struct {
	pid         int // systemd, as the host sees it
	done        chan struct{}
	consoleFile string
}

func (n *nsSystemd) console() string { return readFile(n.consoleFile) }

func (n *nsSystemd) consoleTail() string {
	lines := strings.Split(n.console(), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

// run runs a command in the namespaces (their /proc, /run and systemd).
func (n *nsSystemd) run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(n.pid), "-m", "-p", "-u", "-i", "-n", "-C", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bootSystemd starts systemd as PID 1 of new namespaces, in cgroups of
// its own under the test's current ones (every hierarchy, so that what
// it makes there is removed with them), its log in a file (a PID 1 in a
// container opens no console on a plain file; /dev/kmsg, written line by
// line, can be one).
func bootSystemd(t *testing.T, ctx context.Context, root, units string) *nsSystemd {
	t.Helper()
	tag := filepath.Base(root)
	var cgdirs []string
	self := readFile("/proc/self/cgroup")
	mounts := readFile("/proc/self/mounts")
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		// this hierarchy's line in /proc/self/cgroup
		var cur string
		for _, l := range strings.Split(self, "\n") {
			p := strings.SplitN(l, ":", 3)
			if len(p) != 3 {
				continue
			}
			if f[2] == "cgroup2" && p[1] == "" || f[2] == "cgroup" && hasOpt(f[3], strings.Split(p[1], ",")) {
				cur = p[2]
			}
		}
		if cur == "" {
			continue
		}
		d := filepath.Join(f[1], cur, "virtcon-it-"+tag)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("cgroup for systemd: %v", err)
		}
		cgdirs = append(cgdirs, d)
	}
	t.Cleanup(func() {
		for _, d := range cgdirs {
			removeCgroupTree(d)
		}
	})
	console := filepath.Join(root, "systemd.log")
	write(t, console, "")
	inner := fmt.Sprintf(`set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mount -t proc proc /proc
mount --bind %[1]s /dev/kmsg
mount -t tmpfs tmpfs /sys/fs/cgroup
mkdir /sys/fs/cgroup/systemd /sys/fs/cgroup/unified
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
mount -t cgroup2 none /sys/fs/cgroup/unified
export container=virtcon-test SYSTEMD_UNIT_PATH=%[2]s
exec %[3]s --system --unit=virtcon-test.target --log-target=kmsg --log-level=info --log-color=no --show-status=no
`, console, units, "/lib/systemd/systemd")
	var moves strings.Builder
	for _, d := range cgdirs {
		// a hierarchy that refuses (v1 cpuset, without cpus) is one
		// systemd does not use
		fmt.Fprintf(&moves, "echo $$ > %s/cgroup.procs 2>/dev/null || true\n", d)
	}
	script := moves.String() + "exec unshare --kill-child --pid --fork --mount --uts --ipc --net --cgroup /bin/sh -c '" + strings.ReplaceAll(inner, "'", `'\''`) + "'"
	cmd := exec.Command("/bin/sh", "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// should the test die, unshare dies with it, and with unshare
	// (--kill-child) the namespace's init and all in it
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &nsSystemd{done: make(chan struct{}), consoleFile: console}
	go func() { cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		select {
		case <-n.done:
		default:
			if n.pid > 0 {
				syscall.Kill(n.pid, syscall.SIGKILL) // the namespace's init: everything in it goes
			}
			cmd.Process.Kill()
			<-n.done
		}
		if t.Failed() {
			t.Logf("unshare: %s", out.String())
		}
	})
	// systemd is unshare's child
	sdWait(t, 20*time.Second, "systemd started", func() bool {
		kids := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)))
		if len(kids) == 1 {
			pid, _ := strconv.Atoi(kids[0])
			if strings.HasPrefix(readFile(fmt.Sprintf("/proc/%d/comm", pid)), "systemd") {
				n.pid = pid
				return true
			}
		}
		select {
		case <-n.done:
			t.Fatalf("systemd exited: %s\nconsole:\n%s", out.String(), readFile(console))
		default:
		}
		return false
	}, func() string { return out.String() + readFile(console) })
	sdWait(t, 30*time.Second, "systemd's manager answering", func() bool {
		o, _ := n.run(ctx, "systemctl", "is-system-running")
		s := strings.TrimSpace(o)
		return s == "running" || s == "starting" || s == "degraded"
	}, n.consoleTail)
	return n
}

func hasOpt(opts string, want []string) bool {
	have := strings.Split(opts, ",")
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// removeCgroupTree removes a cgroup and every cgroup under it, deepest
// first (cgroupfs removes a directory only when it is empty of cgroups).
func removeCgroupTree(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			if err := syscall.Rmdir(dirs[i]); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
