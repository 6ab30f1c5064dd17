package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/iso9660"
	"github.com/virtcon/virtcon/vm"
)

// writeISO writes a small ISO 9660 image into dir.
func writeISO(t *testing.T, dir, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := iso9660.Write(&b, "INSTALLER", []iso9660.File{{Name: "readme", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func showSpec(t *testing.T, root, name string) vm.VirtualMachine {
	t.Helper()
	var v vm.VirtualMachine
	out := mustRun(t, "--root", root, "vm", "show", name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("vm show %s: %v\n%s", name, err, out)
	}
	return v
}

// vm create --cdrom: the ISO by its absolute path, a blank disk ahead of
// it, and a VNC display unless --display none.
func TestVMCreateCDROM(t *testing.T) {
	root, _ := vmRoot(t)
	dir := t.TempDir()
	writeISO(t, dir, "inst.iso")
	t.Chdir(dir)
	tests := []struct {
		name        string
		args        []string
		wantISO     string
		wantDisplay string
	}{
		{"cdrom", []string{"--cdrom", "inst.iso", "--disk", "20G", "--firmware", "bios"}, filepath.Join(dir, "inst.iso"), vm.DisplayVNC},
		{"cdrom headless", []string{"--cdrom", "inst.iso", "--disk", "20G", "--display", "none"}, filepath.Join(dir, "inst.iso"), vm.DisplayNone},
		{"live cd", []string{"--cdrom", filepath.Join(dir, "inst.iso")}, filepath.Join(dir, "inst.iso"), vm.DisplayVNC},
	}
	for i, tc := range tests {
		name := "i" + string(rune('a'+i))
		t.Run(tc.name, func(t *testing.T) {
			mustRun(t, append([]string{"--root", root, "vm", "create", name}, tc.args...)...)
			v := showSpec(t, root, name)
			if v.Spec.CDROM == nil || v.Spec.CDROM.ISO != tc.wantISO || v.Spec.Display != tc.wantDisplay {
				t.Errorf("spec: cdrom %+v, display %q; want %s, %s", v.Spec.CDROM, v.Spec.Display, tc.wantISO, tc.wantDisplay)
			}
		})
	}
	if v := showSpec(t, root, "ia"); len(v.Spec.Disks) != 1 || v.Spec.Disks[0].Size != "20G" || v.Spec.Disks[0].Image != "" || v.Spec.Firmware != "bios" {
		t.Errorf("--cdrom --disk 20G --firmware bios: disks %+v, firmware %s; want one blank 20G disk, bios", v.Spec.Disks, v.Spec.Firmware)
	}
}

// Bad ISOs and displays: exit 2, the value named, no VM made.
func TestVMCreateCDROMRefuses(t *testing.T) {
	root, _ := vmRoot(t)
	dir := t.TempDir()
	notISO := filepath.Join(dir, "disk.img")
	os.WriteFile(notISO, make([]byte, 40000), 0o644)
	iso := writeISO(t, dir, "ok.iso")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"not ISO 9660", []string{"--cdrom", notISO, "--disk", "1G"}, []string{"spec.cdrom.iso", "not an ISO 9660 image", notISO}},
		{"a directory", []string{"--cdrom", dir, "--disk", "1G"}, []string{"spec.cdrom.iso", "is a directory", dir}},
		{"missing", []string{"--cdrom", filepath.Join(dir, "nope.iso"), "--disk", "1G"}, []string{"spec.cdrom.iso", "no such file", "nope.iso"}},
		{"a device", []string{"--cdrom", "/dev/null", "--disk", "1G"}, []string{"spec.cdrom.iso", "not a regular file", "/dev/null"}},
		{"bad display", []string{"--cdrom", iso, "--display", "spice"}, []string{"spec.display", `"spice"`}},
		{"blank disk alone", []string{"--disk", "1G"}, []string{"nothing to boot", "cdrom.iso"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := run(t, append([]string{"--root", root, "vm", "create", "bad"}, tc.args...)...)
			if code != ExitUsage {
				t.Errorf("exit %d; want %d (%s)", code, ExitUsage, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q: no %q", errOut, w)
				}
			}
		})
	}
	if rows := ours(t, mustRun(t, "--root", root, "vm", "list", "-o", "json")); len(rows) != 0 {
		t.Errorf("refused creates left VMs: %v", rows)
	}
}

// vm cdrom eject/insert on a stopped VM: the spec changes (the next start
// has it); a VM without a drive: eject refused (exit 2, what to do), insert
// adds one.
func TestVMCDROMCommands(t *testing.T) {
	root, kernel := vmRoot(t)
	dir := t.TempDir()
	a, b := writeISO(t, dir, "a.iso"), writeISO(t, dir, "b.iso")
	mustRun(t, "--root", root, "vm", "create", "inst", "--cdrom", a, "--disk", "1G")
	gen := showSpec(t, root, "inst").Metadata.Generation

	out := mustRun(t, "--root", root, "vm", "cdrom", "eject", "inst")
	if !strings.Contains(out, "inst: ejected "+a) || !strings.Contains(out, "next start") {
		t.Errorf("eject: %q", out)
	}
	if v := showSpec(t, root, "inst"); v.Spec.CDROM == nil || v.Spec.CDROM.ISO != "" || v.Metadata.Generation != gen+1 {
		t.Errorf("after eject: cdrom %+v, generation %d; want an empty drive, %d", v.Spec.CDROM, v.Metadata.Generation, gen+1)
	}
	// again: a no-op that says so (it printed "ejected -" on a running VM)
	if out := mustRun(t, "--root", root, "vm", "cdrom", "eject", "inst"); out != "inst: the CD drive is already empty (nothing changed)\n" {
		t.Errorf("eject of an empty drive: %q; want it to say the drive is already empty", out)
	}
	var ch vm.CDROMChange
	if err := json.Unmarshal([]byte(mustRun(t, "--root", root, "vm", "cdrom", "insert", "inst", b, "-o", "json")), &ch); err != nil {
		t.Fatal(err)
	}
	if ch.ISO != b || ch.Live || ch.Generation != gen+2 {
		t.Errorf("insert -o json: %+v", ch)
	}
	_, errOut, code := run(t, "--root", root, "vm", "cdrom", "insert", "inst", filepath.Join(dir, "gone.iso"))
	if code != ExitUsage || !strings.Contains(errOut, "gone.iso") {
		t.Errorf("insert of a missing ISO: exit %d, %q", code, errOut)
	}

	mustRun(t, "--root", root, "vm", "create", "plain", "--kernel", kernel)
	_, errOut, code = run(t, "--root", root, "vm", "cdrom", "eject", "plain")
	if code != ExitUsage || !strings.Contains(errOut, "no CD drive") || !strings.Contains(errOut, "virt vm cdrom insert plain FILE.iso") {
		t.Errorf("eject without a drive: exit %d, %q; want 2 and how to add one", code, errOut)
	}
	out = mustRun(t, "--root", root, "vm", "cdrom", "insert", "plain", a)
	if !strings.Contains(out, "a CD drive was added") {
		t.Errorf("insert into a stopped VM without a drive: %q", out)
	}
}

// vm display: the socket and the ssh line; a VM without a display: exit 2
// and how to give it one.
func TestVMDisplayCommand(t *testing.T) {
	root, kernel := vmRoot(t)
	iso := writeISO(t, t.TempDir(), "a.iso")
	uid := createdUID(t, root, kernel, "gfx", "--cdrom", iso)
	sock := filepath.Join(root, "run/virtcon/vms", uid, "vnc.sock")
	out := mustRun(t, "--root", root, "vm", "display", "gfx", "--ssh", "admin@kvm1", "--local-port", "5901")
	for _, w := range []string{sock, "ssh -N -L 5901:" + sock + " admin@kvm1", "vncviewer localhost:5901", "not running"} {
		if !strings.Contains(out, w) {
			t.Errorf("display: no %q in\n%s", w, out)
		}
	}
	var view map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "--root", root, "vm", "display", "gfx", "-o", "json")), &view); err != nil {
		t.Fatal(err)
	}
	if view["socket"] != sock || view["type"] != "vnc" || view["serving"] != false || !strings.HasPrefix(view["sshTunnel"].(string), "ssh -N -L 5900:"+sock+" root@") {
		t.Errorf("display -o json: %v", view)
	}

	createdUID(t, root, kernel, "headless")
	_, errOut, code := run(t, "--root", root, "vm", "display", "headless")
	if code != ExitUsage || !strings.Contains(errOut, "has no display") || !strings.Contains(errOut, "spec.display: vnc") || !strings.Contains(errOut, "restart") {
		t.Errorf("display without one: exit %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, "--root", root, "vm", "display", "gfx", "--local-port", "0"); code != ExitUsage {
		t.Errorf("--local-port 0: exit %d, %q", code, errOut)
	}
}

// virt vm show names the CD drive's medium and the display.
func TestVMShowCDROM(t *testing.T) {
	root, _ := vmRoot(t)
	iso := writeISO(t, t.TempDir(), "a.iso")
	mustRun(t, "--root", root, "vm", "create", "inst", "--cdrom", iso, "--disk", "1G")
	out := mustRun(t, "--root", root, "vm", "show", "inst")
	for _, w := range []string{"CD drive:", iso, "Display:", "vnc (virt vm display)"} {
		if !strings.Contains(out, w) {
			t.Errorf("show: no %q in\n%s", w, out)
		}
	}
	mustRun(t, "--root", root, "vm", "cdrom", "eject", "inst")
	if out := mustRun(t, "--root", root, "vm", "show", "inst"); !strings.Contains(out, "empty") {
		t.Errorf("show after eject: no empty drive in\n%s", out)
	}
}
