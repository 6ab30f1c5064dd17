//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
)

// guestConsole is one `virt vm console` session kept open for a test:
// commands are typed into it, their output read back.
type guestConsole struct {
	t   *testing.T
	in  io.WriteCloser
	out *testutil.Buffer
	cmd *exec.Cmd
}

// openConsole attaches to the VM's serial console (in netns ns, or the
// host's when ns is "").
func openConsole(t *testing.T, ns, root, name string) *guestConsole {
	t.Helper()
	argv := []string{virtBin, "--root", root, "vm", "console", name}
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	in, _ := cmd.StdinPipe()
	c := &guestConsole{t: t, in: in, out: &testutil.Buffer{}, cmd: cmd}
	cmd.Stdout = c.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Write([]byte{vm.DetachKey}); cmd.Wait() })
	time.Sleep(300 * time.Millisecond)
	return c
}

// send types a command line.
func (c *guestConsole) send(line string) { fmt.Fprintf(c.in, "%s\n", line) }

// wait polls (every 5 ms) until the output since mark holds re, and
// returns the first match and when it was seen; the test fails after
// timeout.
func (c *guestConsole) wait(mark int, re *regexp.Regexp, timeout time.Duration) ([]string, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		s := c.out.String()
		if mark <= len(s) {
			if m := re.FindStringSubmatch(s[mark:]); m != nil {
				return m, time.Now()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("console: no %s within %s; output:\n%s", re, timeout, c.out.String())
	return nil, time.Time{}
}

// run types a command and waits for re in what follows.
func (c *guestConsole) run(line string, re *regexp.Regexp, timeout time.Duration) []string {
	c.t.Helper()
	mark := len(c.out.String())
	c.send(line)
	m, _ := c.wait(mark, re, timeout)
	return m
}

// guestUntil is a guest shell loop that waits (20 s at most) until cond
// holds, then prints TAG-42 and what report prints: "$((40+2))" is
// expanded by the guest, so the echo of the typed line never matches.
func guestUntil(cond, tag, report string) string {
	return fmt.Sprintf(`i=0; until %s || [ $i -ge 2000 ]; do usleep 10000; i=$((i+1)); done; echo "%s-$((40+2)) %s"`, cond, tag, report)
}

func showVM(t *testing.T, ns, root, name string) vm.VirtualMachine {
	t.Helper()
	var out string
	if ns != "" {
		out = vns(t, ns, root, "vm", "show", name, "-o", "json")
	} else {
		out = v(t, root, "vm", "show", name, "-o", "json")
	}
	var m vm.VirtualMachine
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("vm show: %v: %s", err, out)
	}
	return m
}

// A disk hot-added to a running guest appears in it (/sys/block/vdb, with
// its name as serial), a resize shows the new size in the guest, a shrink
// is refused naming both sizes, Save is refused while a hot-plugged
// device is in, and a detached disk disappears from the guest while its
// file stays (and checks clean). The spec follows each change with a
// generation bump and observedGeneration in step. The kept file then goes
// back cold (stopped VM, start: the bench's baseline), is detached from the
// running VM as a cold-plugged disk and hot-added again.
func TestIntegrationVMHotplugDisk(t *testing.T) {
	g := requireGuest(t)
	qemuImg := testutil.RequireCommand(t, "qemu-img", "apt-get install qemu-utils")
	root := vmRoot(t)
	mf := filepath.Join(root, "hp.yaml")
	os.WriteFile(mf, []byte(fmt.Sprintf(`apiVersion: virtcon/v1
kind: VirtualMachine
metadata: {name: hp}
spec:
  running: true
  memoryMiB: 256
  boot: {kernel: %s, initrd: %s, cmdline: console=ttyS0 quiet}
  disks: [{name: root, size: 16M}]
`, g.kernel, g.initrd)), 0o600)
	v(t, root, "apply", "-f", mf)
	before := showVM(t, "", root, "hp")
	uid := before.Metadata.UID
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 120*time.Second)
	c := openConsole(t, "", root, "hp")
	c.run(`echo "BLK-$((40+2)) $(ls /sys/block | tr '\n' ' ')"`, regexp.MustCompile(`BLK-42 .*vda`), 20*time.Second)

	// hot-add, timed from the command to the guest seeing the disk
	mark := len(c.out.String())
	c.send(guestUntil("[ -e /sys/block/vdb ]", "SEEN", "$(cat /sys/block/vdb/serial) $(cat /sys/block/vdb/size)"))
	time.Sleep(200 * time.Millisecond) // the loop runs
	t0 := time.Now()
	v(t, root, "vm", "disk", "add", "hp", "--size", "32M", "--name", "data")
	added := time.Since(t0)
	m, seenAt := c.wait(mark, regexp.MustCompile(`SEEN-42 (\S*) (\d+)\r?\n`), 30*time.Second)
	hot := seenAt.Sub(t0)
	if m[1] != "data" || m[2] != "65536" {
		t.Fatalf("the hot-added disk in the guest: serial %q, %s sectors; want data, 65536 (32 MiB)", m[1], m[2])
	}
	t.Logf("bench: disk hot-plug: virt vm disk add returned in %s; the guest saw /sys/block/vdb %s after the command started (TCG)", added.Round(time.Millisecond), hot.Round(time.Millisecond))
	if hot > 500*time.Millisecond {
		t.Logf("bench: TARGET MISSED: hot-plug of a disk to the guest seeing it took %s; the issue asks < 500ms", hot.Round(time.Millisecond))
	}

	// online resize: the guest sees the new size
	v(t, root, "vm", "disk", "resize", "hp", "data", "64M")
	m = c.run(guestUntil(`[ "$(cat /sys/block/vdb/size)" = 131072 ]`, "SZ", "$(cat /sys/block/vdb/size)"), regexp.MustCompile(`SZ-42 (\d+)\r?\n`), 30*time.Second)
	if m[1] != "131072" {
		t.Errorf("guest /sys/block/vdb/size after resize to 64M: %s; want 131072", m[1])
	}
	if r := virt(t, nil, "--root", root, "vm", "disk", "resize", "hp", "data", "16M"); r.code != 2 || !strings.Contains(r.stderr, "16 MiB") || !strings.Contains(r.stderr, "64 MiB") {
		t.Errorf("shrink: exit %d %q; want 2 naming 16 MiB and 64 MiB", r.code, r.stderr)
	}
	if r := virt(t, nil, "--root", root, "vm", "save", "hp"); r.code == 0 || !strings.Contains(r.stderr, "hot-plugged since it started") {
		t.Errorf("save after a hot-plug: exit %d %q; want refused", r.code, r.stderr)
	}

	// detach: gone from the guest, file kept
	v(t, root, "vm", "disk", "detach", "hp", "data")
	m = c.run(guestUntil("[ ! -e /sys/block/vdb ]", "GONE", "$(ls /sys/block | tr '\\n' ' ')"), regexp.MustCompile(`GONE-42 (.*?)\r?\n`), 30*time.Second)
	if strings.Contains(m[1], "vdb") {
		t.Errorf("guest block devices after detach: %s; want no vdb", m[1])
	}
	after := showVM(t, "", root, "hp")
	if len(after.Spec.Disks) != 1 || after.Metadata.Generation != before.Metadata.Generation+3 || after.Status.ObservedGeneration != after.Metadata.Generation {
		t.Errorf("spec after add, resize, detach: disks %+v generation %d (was %d) observed %d; want root only, +3, in step",
			after.Spec.Disks, after.Metadata.Generation, before.Metadata.Generation, after.Status.ObservedGeneration)
	}
	file := filepath.Join(root, "var/lib/virtcon/vms", uid, "disk-data.qcow2")
	if out, err := exec.Command(qemuImg, "check", file).CombinedOutput(); err != nil {
		t.Errorf("qemu-img check of the detached disk's kept file: %v: %s", err, out)
	}

	// a cold-plugged disk: the kept file attached to the stopped VM (the
	// baseline of the bench: a cold add and a start until the guest is up
	// with it), then detached live (its -drive goes with it, so QEMU lets
	// go of the file) and hot-added again
	v(t, root, "vm", "kill", "hp")
	os.Truncate(filepath.Join(root, "var/log/virtcon/vms", uid, "serial.log"), 0)
	t0 = time.Now()
	v(t, root, "vm", "disk", "add", "hp", "--name", "data")
	v(t, root, "vm", "start", "hp")
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 120*time.Second)
	cold := time.Since(t0)
	c = openConsole(t, "", root, "hp")
	c.run(`echo "COLD-$((40+2)) $(cat /sys/block/vdb/serial) $(cat /sys/block/vdb/size)"`, regexp.MustCompile(`COLD-42 data 131072`), 20*time.Second)
	t.Logf("bench: disk hot-plug %s vs cold add to the stopped VM + start until the guest is up with it %s: ratio %.3f (TCG, same run)",
		hot.Round(time.Millisecond), cold.Round(time.Millisecond), float64(hot)/float64(cold))
	v(t, root, "vm", "disk", "detach", "hp", "data")
	c.run(guestUntil("[ ! -e /sys/block/vdb ]", "CGONE", "$(ls /sys/block | tr '\\n' ' ')"), regexp.MustCompile(`CGONE-42`), 30*time.Second)
	v(t, root, "vm", "disk", "add", "hp", "--name", "data")
	c.run(guestUntil("[ -e /sys/block/vdb ]", "AGAIN", "$(cat /sys/block/vdb/serial)"), regexp.MustCompile(`AGAIN-42 data`), 30*time.Second)
}

// A NIC hot-added to a running guest on a NAT network gets a DHCP lease
// there, with the MAC the spec records; a detach of the first NIC removes
// it from the guest and its TAP from the bridge, and the NIC left moves to
// index 0 with its TAP renamed to match (so a stop removes it too).
func TestIntegrationVMHotplugNIC(t *testing.T) {
	g := requireGuest(t)
	ns := netns(t)
	root := vmRoot(t)
	cfg := filepath.Join(root, "net.yaml")
	os.WriteFile(cfg, []byte(`apiVersion: virtcon/v1
kind: HostNetwork
networks:
  - name: default
    type: nat
    bridge: vcnat0
    subnet: 10.79.0.0/24
`), 0o600)
	vns(t, ns, root, "net", "apply", "-f", cfg)
	mf := filepath.Join(root, "hn.yaml")
	os.WriteFile(mf, []byte(fmt.Sprintf(`apiVersion: virtcon/v1
kind: VirtualMachine
metadata: {name: hn}
spec:
  running: true
  memoryMiB: 256
  boot: {kernel: %s, initrd: %s, cmdline: console=ttyS0 quiet}
  network: [{network: default}]
`, g.kernel, g.initrd)), 0o600)
	vns(t, ns, root, "apply", "-f", mf)
	before := showVM(t, ns, root, "hn")
	uid := before.Metadata.UID
	waitLog(t, root, uid, "VIRTCON-IP=10.79.0.", 120*time.Second)
	c := openConsole(t, ns, root, "hn")

	vns(t, ns, root, "vm", "nic", "add", "hn", "--network", "default")
	spec := showVM(t, ns, root, "hn")
	if len(spec.Spec.Network) != 2 || spec.Spec.Network[1].MAC == "" || spec.Metadata.Generation != before.Metadata.Generation+1 || spec.Status.ObservedGeneration != spec.Metadata.Generation {
		t.Fatalf("spec after nic add: network %+v generation %d observed %d; want 2 NICs, an explicit MAC, +1, in step", spec.Spec.Network, spec.Metadata.Generation, spec.Status.ObservedGeneration)
	}
	mac := spec.Spec.Network[1].MAC
	m := c.run(guestUntil("[ -e /sys/class/net/eth1 ]", "NIC", "$(cat /sys/class/net/eth1/address)"), regexp.MustCompile(`NIC-42 (\S+)\r?\n`), 30*time.Second)
	if m[1] != mac {
		t.Fatalf("the hot-added NIC in the guest: MAC %q; want %s (the spec's)", m[1], mac)
	}
	m = c.run("udhcpc -i eth1 -n -q -t 5 -s /etc/udhcpc/default.script >/dev/null 2>&1; echo \"DHCP-$((40+2)) $(ip -4 -o addr show dev eth1)\"",
		regexp.MustCompile(`DHCP-42 .*inet (10\.79\.0\.\d+)/`), 60*time.Second)
	t.Logf("the hot-added NIC %s got %s by DHCP", mac, m[1])
	tapRE := regexp.MustCompile(`: (vc[0-9a-f]{9,})[:@].* master vcnat0 `)
	taps := func() []string {
		links, _ := exec.Command("ip", "-n", ns, "-o", "link", "show").Output()
		var out []string
		for _, m := range tapRE.FindAllSubmatch(links, -1) {
			out = append(out, string(m[1]))
		}
		return out
	}
	if got := taps(); len(got) != 2 {
		t.Errorf("TAPs on vcnat0 with 2 NICs: %v; want 2", got)
	}

	// detach the first NIC: the second becomes index 0, its TAP renamed
	vns(t, ns, root, "vm", "nic", "detach", "hn", "0")
	c.run(guestUntil("[ ! -e /sys/class/net/eth0 ]", "NIC0GONE", "$(ls /sys/class/net | tr '\\n' ' ')"), regexp.MustCompile(`NIC0GONE-42`), 30*time.Second)
	after := showVM(t, ns, root, "hn")
	if len(after.Spec.Network) != 1 || after.Spec.Network[0].MAC != mac {
		t.Errorf("spec after detaching NIC 0: %+v; want the hot-added one (%s) only", after.Spec.Network, mac)
	}
	if got, want := taps(), netcfg.TAPName(uid, 0); len(got) != 1 || got[0] != want {
		t.Errorf("TAPs on vcnat0 after the detach: %v; want [%s] (NIC 0's name)", got, want)
	}
	// the NIC left still works on its renamed TAP
	c.run("ping -c 1 -W 5 10.79.0.1 >/dev/null && echo \"PING-$((40+2))\"", regexp.MustCompile(`PING-42`), 30*time.Second)
	vns(t, ns, root, "vm", "kill", "hn")
	if got := taps(); len(got) != 0 {
		t.Errorf("TAPs left after the VM stopped: %v", got)
	}
}
