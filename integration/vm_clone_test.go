//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// cloneSays types command on name's console and returns what came back
// once want did.
func cloneSays(t *testing.T, root, name, command, want string) string {
	t.Helper()
	out, err := consoleSession(root, name, command, want, 30*time.Second)
	if err != nil {
		t.Errorf("console exited with %v after Ctrl-]", err)
	}
	if !strings.Contains(out, want) {
		t.Fatalf("%s's console: no %q after %q; got %q", name, want, command, out)
	}
	return out
}

// sectorRE is what cloneSector prints: S<sector>=[<its first 8 bytes>].
var sectorRE = regexp.MustCompile(`S(\d+)=\[([A-Z0-9]*)\]END`)

// guestWrite writes an 8-byte marker to a sector of the guest's disk and
// flushes it to the disk file.
func guestWrite(t *testing.T, root, name string, sector int, marker string) {
	t.Helper()
	guestWriteTo(t, root, name, "/dev/vda", sector, marker)
}

func guestWriteTo(t *testing.T, root, name, dev string, sector int, marker string) {
	t.Helper()
	cloneSays(t, root, name, "printf "+marker+" | dd of="+dev+" bs=512 seek="+itoa(sector)+" count=1 conv=sync,fsync 2>/dev/null; echo WROTE-$((40+2))", "WROTE-42")
}

// guestRead reads a sector's first 8 bytes past the guest's page cache.
func guestRead(t *testing.T, root, name string, sector int) string {
	t.Helper()
	out := cloneSays(t, root, name, `echo 3 >/proc/sys/vm/drop_caches; echo "S`+itoa(sector)+`=[$(dd if=/dev/vda bs=512 skip=`+itoa(sector)+` count=1 2>/dev/null | head -c 8 | tr -dc A-Z0-9)]E""ND"`, "]END")
	for _, m := range sectorRE.FindAllStringSubmatch(out, -1) {
		if m[1] == itoa(sector) {
			return m[2]
		}
	}
	t.Fatalf("no S%d=[...] read back from %s: %q", sector, name, out)
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// hostRead reads 8 bytes at sector of a qcow2 chain from the host
// (qemu-io, shared with a QEMU that may hold it).
func hostRead(t *testing.T, disk string, sector int) string {
	t.Helper()
	out, err := exec.Command("qemu-io", "-r", "-U", "-c", "read -v "+itoa(sector*512)+" 8", disk).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-io read %s: %v: %s", disk, err, out)
	}
	// "00032000:  53 52 43 4d 41 52 4b 31  SRCMARK1"
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 10 && strings.HasSuffix(f[0], ":") {
			return strings.Trim(f[len(f)-1], ".")
		}
	}
	t.Fatalf("qemu-io read %s: no data line: %s", disk, out)
	return ""
}

// A linked clone of a running source is made in well under a second,
// boots with its own instance-id while the source runs on, reads the
// source's disk as it was, and writes on either side stay on that side;
// a full clone of the running source (QEMU's backup job) holds the data
// too; qemu-img check is clean on every file after; no writable file is
// the other VM's.
func TestIntegrationVMCloneLinkedRunning(t *testing.T) {
	g := requireGuest(t)
	requireTool(t, "qemu-io")
	root := vmRoot(t)
	var src vm.Entry
	out := v(t, root, "vm", "create", "src", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "256", "--disk", "32M",
		"--cmdline", "console=ttyS0 quiet", "--start", "-o", "json")
	if err := json.Unmarshal([]byte(out), &src); err != nil {
		t.Fatal(err)
	}
	waitLog(t, root, src.UID, "VIRTCON-INSTANCE-ID="+src.UID, 60*time.Second)
	guestWrite(t, root, "src", 100, "SRCMARK1")
	srcDir := filepath.Join(root, "var/lib/virtcon/vms", src.UID)
	srcDisk := filepath.Join(srcDir, "disk-root.qcow2")
	// a hot-plugged disk is a blockdev node, not a drive of the command
	// line: the clone's QMP commands name it so
	v(t, root, "vm", "disk", "add", "src", "--size", "16M", "--name", "data")
	srcData := filepath.Join(srcDir, "disk-data.qcow2")
	cloneSays(t, root, "src", "while [ ! -b /dev/vdb ]; do sleep 0.2; done; echo VDB-$((40+2))", "VDB-42")
	guestWriteTo(t, root, "src", "/dev/vdb", 10, "DATAMRK1")

	start := time.Now()
	var cl vm.Entry
	out = v(t, root, "vm", "clone", "src", "cl", "--linked", "--start", "-o", "json")
	took := time.Since(start)
	if err := json.Unmarshal([]byte(out), &cl); err != nil {
		t.Fatal(err)
	}
	t.Logf("virt vm clone --linked --start of a running source: %v", took)
	if e := entry(t, root, "src"); e.Phase != vm.PhaseRunning || e.PID != src.PID {
		t.Fatalf("source after the clone: %s pid %d; want it running on as pid %d", e.Phase, e.PID, src.PID)
	}
	if cl.UID == src.UID || cl.Phase != vm.PhaseRunning {
		t.Fatalf("clone: %+v; want a new UID, running", cl)
	}
	waitLog(t, root, cl.UID, "VIRTCON-INSTANCE-ID="+cl.UID, 60*time.Second)
	if strings.Contains(serialLog(root, cl.UID), "VIRTCON-INSTANCE-ID="+src.UID) {
		t.Error("the clone booted with the source's instance-id")
	}
	clDir := filepath.Join(root, "var/lib/virtcon/vms", cl.UID)
	clDisk := filepath.Join(clDir, "disk-root.qcow2")

	// the clone reads what the source wrote before it; writes stay apart
	if got := guestRead(t, root, "cl", 100); got != "SRCMARK1" {
		t.Fatalf("clone's disk at sector 100: %q; want the source's SRCMARK1", got)
	}
	guestWrite(t, root, "cl", 100, "CLONEMK1")
	guestWrite(t, root, "cl", 200, "CLONEMK2")
	guestWrite(t, root, "src", 300, "SRCMARK3")
	if got := guestRead(t, root, "src", 100); got != "SRCMARK1" {
		t.Errorf("source's disk at sector 100 after the clone wrote there: %q; want SRCMARK1", got)
	}
	if got := guestRead(t, root, "cl", 300); got == "SRCMARK3" {
		t.Error("a write of the source after the clone reached the clone")
	}
	for _, c := range []struct {
		disk   string
		sector int
		want   string
	}{{srcDisk, 100, "SRCMARK1"}, {srcDisk, 200, ""}, {srcDisk, 300, "SRCMARK3"}, {clDisk, 100, "CLONEMK1"}, {clDisk, 200, "CLONEMK2"}} {
		got := hostRead(t, c.disk, c.sector)
		if c.want == "" && got != "" || c.want != "" && got != c.want {
			t.Errorf("host read of %s at sector %d: %q; want %q", c.disk, c.sector, got, c.want)
		}
	}

	guestWriteTo(t, root, "src", "/dev/vdb", 20, "DATAMRK2")
	clData := filepath.Join(clDir, "disk-data.qcow2")
	for _, c := range []struct {
		disk   string
		sector int
		want   string
	}{{srcData, 10, "DATAMRK1"}, {srcData, 20, "DATAMRK2"}, {clData, 10, "DATAMRK1"}, {clData, 20, ""}} {
		if got := hostRead(t, c.disk, c.sector); got != c.want {
			t.Errorf("host read of %s at sector %d: %q; want %q", c.disk, c.sector, got, c.want)
		}
	}

	// a full clone of the running source: QEMU copies, point in time
	var full vm.Entry
	if err := json.Unmarshal([]byte(v(t, root, "vm", "clone", "src", "full", "-o", "json")), &full); err != nil {
		t.Fatal(err)
	}
	fullDisk := filepath.Join(root, "var/lib/virtcon/vms", full.UID, "disk-root.qcow2")
	if got := hostRead(t, fullDisk, 300); got != "SRCMARK3" {
		t.Errorf("full clone of the running source at sector 300: %q; want SRCMARK3", got)
	}
	if got := hostRead(t, fullDisk, 100); got != "SRCMARK1" {
		t.Errorf("full clone of the running source at sector 100: %q; want SRCMARK1", got)
	}

	// the source cannot go while its clone reads its layer
	if r := virt(t, nil, "--root", root, "vm", "delete", "src", "--force"); r.code == 0 || !strings.Contains(r.stderr, "linked clones") || !strings.Contains(r.stderr, "cl") {
		t.Errorf("vm delete of the linked clone's source: exit %d %q; want it refused naming cl", r.code, r.stderr)
	}
	for _, n := range []string{"cl", "src"} {
		v(t, root, "vm", "kill", n)
	}
	if fd, _ := filepath.Glob(filepath.Join(srcDir, "frozen-data-*.qcow2")); len(fd) != 1 {
		t.Errorf("frozen layers of the hot-plugged disk: %q; want one", fd)
	} else if out, err := exec.Command("qemu-img", "check", fd[0]).CombinedOutput(); err != nil {
		t.Errorf("qemu-img check %s: %v\n%s", fd[0], err, out)
	}
	for _, d := range []string{srcData, clData} {
		if out, err := exec.Command("qemu-img", "check", d).CombinedOutput(); err != nil {
			t.Errorf("qemu-img check %s: %v\n%s", d, err, out)
		}
	}
	frozen, _ := filepath.Glob(filepath.Join(srcDir, "frozen-root-*.qcow2"))
	if len(frozen) != 1 {
		t.Fatalf("frozen layers in the source's directory: %q; want one", frozen)
	}
	if fi, err := os.Stat(frozen[0]); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("frozen layer %s: %v %v; want 0444", frozen[0], fi, err)
	}
	for _, d := range []string{srcDisk, clDisk, frozen[0], fullDisk} {
		if out, err := exec.Command("qemu-img", "check", d).CombinedOutput(); err != nil {
			t.Errorf("qemu-img check %s: %v\n%s", d, err, out)
		}
	}
	for _, d := range []string{srcDisk, clDisk} {
		out, _ := exec.Command("qemu-img", "info", "--output=json", d).Output()
		var info struct {
			Backing string `json:"full-backing-filename"`
		}
		if err := json.Unmarshal(out, &info); err != nil || info.Backing != frozen[0] {
			t.Errorf("%s is backed by %q (%v); want the frozen layer %s", d, info.Backing, err, frozen[0])
		}
	}
	// no writable file of one VM's directory is the other's
	inodes := map[uint64]string{}
	for _, dir := range []string{srcDir, clDir, filepath.Dir(fullDisk)} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o222 == 0 {
				continue
			}
			// (a running source's live-* name is its own disk's second name)
			ino := fi.Sys().(*syscall.Stat_t).Ino
			if q, ok := inodes[ino]; ok && filepath.Dir(q) != dir {
				t.Errorf("writable file shared: %s is %s", p, q)
			}
			inodes[ino] = p
		}
	}
}

func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (apt-get install qemu-utils)", name)
	}
}
