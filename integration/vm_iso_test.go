//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/qmp"
	"github.com/virtcon/virtcon/vm"
)

// isoMarker is on the kernel command line that only the ISO's isolinux
// passes: the kernel prints it on the serial console (loglevel 6 shows
// its "Kernel command line:" notice).
const isoMarker = "virtcon.iso=VIRTCON-ISO-BOOTED"

// requireISOTools skips without xorriso or isolinux (in CI, whose
// install-deps.sh installs them, it fails instead).
func requireISOTools(t *testing.T) (xorriso, isolinux, ldlinux string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing in CI (scripts/install-deps.sh installs xorriso, isolinux, syslinux-common)", what)
		}
		t.Skipf("needs %s (apt-get install xorriso isolinux syslinux-common)", what)
	}
	xorriso, err := exec.LookPath("xorriso")
	if err != nil {
		missing("xorriso")
	}
	isolinux, ldlinux = "/usr/lib/ISOLINUX/isolinux.bin", "/usr/lib/syslinux/modules/bios/ldlinux.c32"
	for _, p := range []string{isolinux, ldlinux} {
		if !fileExists(p) {
			missing(p)
		}
	}
	return xorriso, isolinux, ldlinux
}

// buildInstallerISO makes a BIOS-bootable (isolinux, El Torito) ISO that
// holds the test guest's kernel and initrd, labelled VIRTCON_TEST.
func buildInstallerISO(t *testing.T, g guest) string {
	t.Helper()
	xorriso, isolinux, ldlinux := requireISOTools(t)
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(isolinux, filepath.Join(tree, "isolinux/isolinux.bin"))
	copyFile(ldlinux, filepath.Join(tree, "isolinux/ldlinux.c32"))
	copyFile(g.efiKernel, filepath.Join(tree, "vmlinuz")) // the bzImage: isolinux loads it
	copyFile(g.initrd, filepath.Join(tree, "initrd.img"))
	cfg := "SERIAL 0 115200\nDEFAULT guest\nPROMPT 0\nTIMEOUT 0\nLABEL guest\n  KERNEL /vmlinuz\n  APPEND initrd=/initrd.img console=ttyS0 loglevel=6 " + isoMarker + "\n"
	if err := os.WriteFile(filepath.Join(tree, "isolinux/isolinux.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(dir, "installer.iso")
	out, err := exec.Command(xorriso, "-as", "mkisofs", "-quiet", "-o", iso,
		"-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
		"-V", "VIRTCON_TEST", tree).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	return iso
}

// cdromBlock is the CD drive's entry in the running QEMU's query-block.
func cdromBlock(t *testing.T, root, uid string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mon, err := qmp.Dial(ctx, filepath.Join(root, "run/virtcon/vms", uid, "qmp.sock"), qmp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	var blocks []map[string]any
	if err := mon.Execute(ctx, "query-block", nil, &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b["qdev"] == vm.CDROMDeviceID || b["device"] == vm.CDROMDriveID {
			return b
		}
	}
	t.Fatalf("query-block: no CD drive: %v", blocks)
	return nil
}

// readCDs has the guest read the first sector of each of its CDs (the
// seed and the installer's drive) and prints what dd said, then
// CDS-READ-42 (computed: the echo of the typed line must not match).
const readCDs = `for d in /sys/block/sr*; do dd if=/dev/${d##*/} of=/dev/null bs=2048 count=1 2>&1 | tail -n 1; done; echo CDS-READ-$((40+2))`

// An installer ISO built here (isolinux, the test guest's kernel and
// initrd) boots in a VM with a blank disk ahead of it in the boot order;
// its display answers as a VNC server on the unix socket virt vm display
// names; vm cdrom eject empties the drive of the running VM even though
// the guest has the CD mounted (tray locked: forced), QEMU shows no
// medium and the guest reads none; the spec follows, realised.
func TestIntegrationVMInstallFromISO(t *testing.T) {
	g := requireGuest(t)
	iso := buildInstallerISO(t, g)
	root := vmRoot(t)
	var e vm.Entry
	if err := json.Unmarshal([]byte(v(t, root, "vm", "create", "inst", "--cdrom", iso, "--disk", "1G", "--firmware", "bios", "--memory", "256", "--start", "-o", "json")), &e); err != nil {
		t.Fatal(err)
	}
	uid := e.UID
	argv, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(e.PID), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.ReplaceAll(string(argv), "\x00", " ")
	for _, want := range []string{"id=" + vm.DiskDeviceID("root") + ",", "bootindex=1", "id=" + vm.CDROMDeviceID + ",bootindex=2", "file=" + iso + ",format=raw", "-vnc ", "vnc.sock"} {
		if !strings.Contains(args, want) {
			t.Errorf("QEMU argv has no %q (the blank disk first, then the CD; a VNC display):\n%s", want, args)
		}
	}
	if strings.Contains(args, "-kernel") {
		t.Errorf("QEMU argv has -kernel: the guest must boot from the ISO:\n%s", args)
	}
	took := waitLog(t, root, uid, isoMarker, 90*time.Second)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 60*time.Second)
	// the init's shell: what is typed before it runs is lost
	waitLog(t, root, uid, "virtcon-guest# ", 60*time.Second)
	t.Logf("booted from the ISO through a blank disk in %v", took)

	// the display: virt vm display's socket speaks RFB
	var d struct {
		Socket, SSHTunnel string
		Serving           bool
	}
	if err := json.Unmarshal([]byte(v(t, root, "vm", "display", "inst", "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "run/virtcon/vms", uid, "vnc.sock"); d.Socket != want || !d.Serving || !strings.Contains(d.SSHTunnel, "-L 5900:"+want+" ") {
		t.Errorf("vm display: %+v; want socket %s, serving, an ssh -L line to it", d, want)
	}
	conn, err := net.DialTimeout("unix", d.Socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	banner := make([]byte, 12)
	if _, err := conn.Read(banner); err != nil || !strings.HasPrefix(string(banner), "RFB 003.00") {
		t.Errorf("VNC socket: %q, %v; want an RFB 003.00x banner", banner, err)
	}
	conn.Close()

	// the guest mounts the CD (Linux locks the tray) and reads both CDs
	out, _ := consoleSession(root, "inst", "mkdir -p /mnt/iso && mount -t iso9660 -o ro $(findfs LABEL=VIRTCON_TEST) /mnt/iso && ls /mnt/iso/isolinux && "+readCDs, "CDS-READ-42", 60*time.Second)
	if !strings.Contains(out, "isolinux.cfg") || strings.Contains(out, "No medium found") {
		t.Fatalf("before the eject the guest should mount the CD and read both CDs:\n%s", out)
	}
	if b := cdromBlock(t, root, uid); b["inserted"] == nil || b["locked"] != true {
		t.Errorf("query-block before the eject: %v; want a medium in a locked tray", b)
	}

	var ch vm.CDROMChange
	if err := json.Unmarshal([]byte(v(t, root, "vm", "cdrom", "eject", "inst", "-o", "json")), &ch); err != nil {
		t.Fatal(err)
	}
	if !ch.Live || !ch.Forced || ch.Previous != iso || ch.ISO != "" {
		t.Errorf("vm cdrom eject: %+v; want live, forced (the guest locked the tray), %s out", ch, iso)
	}
	if b := cdromBlock(t, root, uid); b["inserted"] != nil {
		t.Errorf("query-block after the eject: %v; want no medium inserted", b)
	}
	out, _ = consoleSession(root, "inst", readCDs, "CDS-READ-42", 60*time.Second)
	if strings.Count(out, "No medium found") != 1 {
		t.Errorf("after the eject one CD (the installer's drive) should have no medium, the seed its own:\n%s", out)
	}
	var got vm.VirtualMachine
	if err := json.Unmarshal([]byte(v(t, root, "vm", "show", "inst", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.CDROM == nil || got.Spec.CDROM.ISO != "" || got.Metadata.Generation != ch.Generation || got.Status.ObservedGeneration != got.Metadata.Generation {
		t.Errorf("spec after the eject: cdrom %+v, generation %d, observed %d; want an empty drive, realised", got.Spec.CDROM, got.Metadata.Generation, got.Status.ObservedGeneration)
	}
}
