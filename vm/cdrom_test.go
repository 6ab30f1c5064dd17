package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/virtcon/virtcon/internal/iso9660"
)

// testISO writes a small ISO 9660 image (iso9660.Write) and returns its path.
func testISO(t *testing.T, dir, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := iso9660.Write(&b, "INSTALLER", []File{{Name: "readme", Data: []byte("install me\n")}}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// File is iso9660's, for testISO's readability.
type File = iso9660.File

func TestValidateCDROMAndDisplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	iso := testISO(t, dir, "debian.iso")
	notISO := filepath.Join(dir, "zeros.iso")
	if err := os.WriteFile(notISO, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.iso")
	if err := os.WriteFile(short, []byte("CD001"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe.iso")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "current.iso")
	if err := os.Symlink(iso, link); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(dir, "dir.iso")
	if err := os.Symlink(dir, dirLink); err != nil {
		t.Fatal(err)
	}
	lim := Limits{CPUs: 4, MemoryMiB: 4096, ISO: checkISO}
	blank := []Disk{{Name: "root", Size: "20G"}}
	tests := []struct {
		name   string
		spec   func(s *Spec)
		field  string // "" : valid
		substr string
	}{
		{"installer and a blank disk", func(s *Spec) { s.Disks, s.CDROM = blank, &CDROM{ISO: iso} }, "", ""},
		{"live CD without a disk", func(s *Spec) { s.Disks, s.CDROM = nil, &CDROM{ISO: iso} }, "", ""},
		{"installed: drive ejected, disk filled", func(s *Spec) { s.Disks, s.CDROM = blank, &CDROM{} }, "", ""},
		{"symlink to an ISO", func(s *Spec) { s.CDROM = &CDROM{ISO: link} }, "", ""},
		{"display vnc", func(s *Spec) { s.Display = DisplayVNC }, "", ""},
		{"display none", func(s *Spec) { s.Display = DisplayNone }, "", ""},
		{"relative path", func(s *Spec) { s.CDROM = &CDROM{ISO: "debian.iso"} }, "spec.cdrom.iso", `must be an absolute path (got "debian.iso")`},
		{"missing file", func(s *Spec) { s.CDROM = &CDROM{ISO: filepath.Join(dir, "gone.iso")} }, "spec.cdrom.iso", `no such file (got "` + filepath.Join(dir, "gone.iso") + `")`},
		{"a directory", func(s *Spec) { s.CDROM = &CDROM{ISO: dir} }, "spec.cdrom.iso", `is a directory, not an ISO image file (got "` + dir + `")`},
		{"symlink to a directory", func(s *Spec) { s.CDROM = &CDROM{ISO: dirLink} }, "spec.cdrom.iso", "is a directory"},
		{"a named pipe", func(s *Spec) { s.CDROM = &CDROM{ISO: fifo} }, "spec.cdrom.iso", "is not a regular file (a named pipe)"},
		{"a device", func(s *Spec) { s.CDROM = &CDROM{ISO: "/dev/null"} }, "spec.cdrom.iso", `is not a regular file (a character device) (got "/dev/null")`},
		{"not ISO 9660", func(s *Spec) { s.CDROM = &CDROM{ISO: notISO} }, "spec.cdrom.iso", `is not an ISO 9660 image (no CD001 volume descriptor at sector 16) (got "` + notISO + `")`},
		{"shorter than an ISO", func(s *Spec) { s.CDROM = &CDROM{ISO: short} }, "spec.cdrom.iso", "is not an ISO 9660 image"},
		{"display spice", func(s *Spec) { s.Display = "spice" }, "spec.display", `must be none or vnc (got "spice")`},
		{"display VNC", func(s *Spec) { s.Display = "VNC" }, "spec.display", `(got "VNC")`},
		{"blank disk, no drive", func(s *Spec) { s.Disks = blank }, "spec", "nothing to boot"},
		{"empty drive, no disk", func(s *Spec) { s.Disks, s.CDROM = nil, &CDROM{} }, "spec", "nothing to boot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := validVM()
			tc.spec(&vm.Spec)
			err := Validate(vm, lim)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v; want nil", err)
				}
				return
			}
			checkFieldError(t, err, tc.field, tc.substr)
		})
	}

	// without a host to look at (Limits.ISO nil) only the form is checked
	vm := validVM()
	vm.Spec.CDROM = &CDROM{ISO: filepath.Join(dir, "gone.iso")}
	if err := Validate(vm, Limits{}); err != nil {
		t.Errorf("Validate without Limits.ISO: %v; want nil", err)
	}
	vm.Spec.CDROM.ISO = "rel.iso"
	checkFieldError(t, Validate(vm, Limits{}), "spec.cdrom.iso", `"rel.iso"`)
}

// cdromManager is a test manager whose admission checks ISO files.
func cdromManager(t *testing.T) (*Manager, string) {
	t.Helper()
	m, _, host := newTestManager(t)
	m.opts.Limits.ISO = checkISO
	return m, host
}

func TestCDROMStopped(t *testing.T) {
	m, _ := cdromManager(t)
	ctx := context.Background()
	dir := t.TempDir()
	iso, other := testISO(t, dir, "a.iso"), testISO(t, dir, "b.iso")
	spec := kernelVM("inst", testKernel(t))
	spec.Spec.CDROM = &CDROM{ISO: iso}
	v := mustCreate(t, m, spec)
	gen := v.Metadata.Generation

	ch, err := m.EjectCDROM(ctx, "inst")
	if err != nil {
		t.Fatal(err)
	}
	if ch.Live || ch.ISO != "" || ch.Previous != iso || ch.Generation != gen+1 {
		t.Errorf("eject = %+v; want spec only, %q out, generation %d", ch, iso, gen+1)
	}
	got, _ := m.store.load(v.Metadata.UID)
	if got.Spec.CDROM == nil || got.Spec.CDROM.ISO != "" || got.Metadata.Generation != gen+1 {
		t.Errorf("spec after eject: cdrom %+v, generation %d; want an empty drive, %d", got.Spec.CDROM, got.Metadata.Generation, gen+1)
	}
	if _, err := m.EjectCDROM(ctx, "inst"); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.store.load(v.Metadata.UID); again.Metadata.Generation != gen+1 {
		t.Errorf("ejecting an empty drive bumped the generation to %d", again.Metadata.Generation)
	}

	// bad ISOs: refused by name, nothing written
	notISO := filepath.Join(dir, "x.img")
	os.WriteFile(notISO, make([]byte, 40000), 0o644)
	for _, bad := range []string{notISO, dir, filepath.Join(dir, "gone.iso"), "b.iso"} {
		_, err := m.InsertCDROM(ctx, "inst", bad)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.cdrom.iso") || !strings.Contains(err.Error(), bad) {
			t.Errorf("insert %q: %v; want an invalid spec.cdrom.iso naming it", bad, err)
		}
	}
	if after, _ := m.store.load(v.Metadata.UID); after.Metadata.Generation != gen+1 || after.Spec.CDROM.ISO != "" {
		t.Errorf("a refused insert changed the spec: %+v, generation %d", after.Spec.CDROM, after.Metadata.Generation)
	}

	ch, err = m.InsertCDROM(ctx, v.Metadata.UID, other)
	if err != nil {
		t.Fatal(err)
	}
	if ch.ISO != other || ch.Live || ch.Added {
		t.Errorf("insert = %+v", ch)
	}
	if got, _ := m.store.load(v.Metadata.UID); got.Spec.CDROM.ISO != other || got.Metadata.Generation != gen+2 {
		t.Errorf("spec after insert: %+v, generation %d", got.Spec.CDROM, got.Metadata.Generation)
	}

	// a VM without a drive: eject refused; insert while stopped adds one
	w := mustCreate(t, m, kernelVM("nodrive", testKernel(t)))
	if _, err := m.EjectCDROM(ctx, "nodrive"); !errors.Is(err, ErrNoCDROM) || !errors.Is(err, ErrInvalid) {
		t.Errorf("eject without a drive: %v; want ErrNoCDROM (and ErrInvalid)", err)
	}
	ch, err = m.InsertCDROM(ctx, "nodrive", iso)
	if err != nil || !ch.Added {
		t.Fatalf("insert into a stopped VM without a drive = %+v, %v; want a drive added", ch, err)
	}
	if got, _ := m.store.load(w.Metadata.UID); got.Spec.CDROM == nil || got.Spec.CDROM.ISO != iso {
		t.Errorf("spec after adding a drive: %+v", got.Spec.CDROM)
	}
}

// cdromMonitor answers query-block with a CD drive (cd0 present) holding
// iso, locked or not, and records the arguments of the tray commands.
func cdromMonitor(present, locked bool, iso string, args *[]string) *fakeMonitor {
	return &fakeMonitor{handle: func(cmd string, raw json.RawMessage) any {
		switch cmd {
		case "query-block":
			out := []map[string]any{{"device": "disk-root", "qdev": "blk-root", "inserted": map[string]any{"file": "/x.qcow2"}}}
			if present {
				cd := map[string]any{"device": CDROMDriveID, "qdev": CDROMDeviceID, "locked": locked, "removable": true, "tray_open": false}
				if iso != "" {
					cd["inserted"] = map[string]any{"file": iso}
				}
				out = append(out, cd)
			}
			return out
		default:
			*args = append(*args, cmd+" "+string(raw))
		}
		return nil
	}}
}

func TestCDROMRunning(t *testing.T) {
	m, host := cdromManager(t)
	ctx := context.Background()
	dir := t.TempDir()
	iso, other := testISO(t, dir, "a.iso"), testISO(t, dir, "b.iso")
	spec := kernelVM("inst", testKernel(t))
	spec.Spec.CDROM = &CDROM{ISO: iso}
	v := mustCreate(t, m, spec)
	uid := v.Metadata.UID
	startFakeQEMU(t, m, host, uid, nil)
	// the running QEMU realised the spec
	v.Status.ObservedGeneration = v.Metadata.Generation
	if err := m.store.save(v); err != nil {
		t.Fatal(err)
	}

	var args []string
	mon := serveMonitor(t, m.runPath(uid, qmpSockName), cdromMonitor(true, true, iso, &args))
	ch, err := m.EjectCDROM(ctx, "inst")
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Live || !ch.Forced || ch.ISO != "" {
		t.Errorf("eject of a running VM with a locked tray = %+v; want live and forced", ch)
	}
	if got, want := mon.gotString(), "query-block,blockdev-open-tray,blockdev-remove-medium"; got != want {
		t.Errorf("QMP commands: %s; want %s", got, want)
	}
	if len(args) == 0 || !strings.Contains(args[0], `"force":true`) || !strings.Contains(args[0], `"id":"cd0"`) {
		t.Errorf("blockdev-open-tray args: %v; want id cd0 and force", args)
	}
	got, _ := m.store.load(uid)
	if got.Spec.CDROM.ISO != "" || got.Metadata.Generation != v.Metadata.Generation+1 || got.Status.ObservedGeneration != got.Metadata.Generation {
		t.Errorf("after a live eject: cdrom %+v, generation %d observed %d; want empty, realised", got.Spec.CDROM, got.Metadata.Generation, got.Status.ObservedGeneration)
	}

	// ejecting the empty drive again: nothing changes, not even its tray
	args = nil
	mon = serveMonitor(t, m.runPath(uid, qmpSockName), cdromMonitor(true, false, "", &args))
	if ch, err = m.EjectCDROM(ctx, "inst"); err != nil {
		t.Fatal(err)
	}
	if !ch.Live || !ch.AlreadyEmpty || ch.Previous != "" || ch.Generation != got.Metadata.Generation {
		t.Errorf("eject of an empty drive = %+v; want live, already empty, generation %d", ch, got.Metadata.Generation)
	}
	if got, want := mon.gotString(), "query-block"; got != want {
		t.Errorf("QMP commands ejecting an empty drive: %s; want %s (the tray left alone)", got, want)
	}
	// the spec says empty but QEMU's drive holds an ISO (a change not
	// realised): ejected, and said so by its file
	mon = serveMonitor(t, m.runPath(uid, qmpSockName), cdromMonitor(true, false, iso, &args))
	if ch, err = m.EjectCDROM(ctx, "inst"); err != nil {
		t.Fatal(err)
	}
	if ch.AlreadyEmpty || ch.Previous != iso {
		t.Errorf("eject of a drive QEMU still has %s in = %+v; want it ejected, previous %s", iso, ch, iso)
	}
	if got, want := mon.gotString(), "query-block,blockdev-open-tray,blockdev-remove-medium"; got != want {
		t.Errorf("QMP commands: %s; want %s", got, want)
	}

	args = nil
	mon = serveMonitor(t, m.runPath(uid, qmpSockName), cdromMonitor(true, false, "", &args))
	if ch, err = m.InsertCDROM(ctx, "inst", other); err != nil {
		t.Fatal(err)
	}
	if !ch.Live || ch.Forced {
		t.Errorf("insert = %+v; want live, not forced (unlocked)", ch)
	}
	if got, want := mon.gotString(), "query-block,blockdev-open-tray,blockdev-remove-medium,blockdev-change-medium"; got != want {
		t.Errorf("QMP commands: %s; want %s", got, want)
	}
	if last := args[len(args)-1]; !strings.Contains(last, `"filename":"`+other+`"`) || !strings.Contains(last, `"read-only-mode":"read-only"`) {
		t.Errorf("blockdev-change-medium args: %s", last)
	}

	// the running QEMU has no drive (started before spec.cdrom was set):
	// refused, the spec untouched
	before, _ := m.store.load(uid)
	serveMonitor(t, m.runPath(uid, qmpSockName), cdromMonitor(false, false, "", &args))
	if _, err := m.EjectCDROM(ctx, "inst"); !errors.Is(err, ErrNoCDROM) || !strings.Contains(err.Error(), "running VM has no CD drive") {
		t.Errorf("eject on a QEMU without the drive: %v; want ErrNoCDROM", err)
	}
	if after, _ := m.store.load(uid); after.Metadata.Generation != before.Metadata.Generation {
		t.Errorf("a refused eject bumped the generation")
	}

	// a running VM without a drive in its spec: no drive is hot-added
	w := mustCreate(t, m, kernelVM("nodrive", testKernel(t)))
	startFakeQEMU(t, m, host, w.Metadata.UID, nil)
	var nd *NoCDROMError
	if _, err := m.InsertCDROM(ctx, "nodrive", iso); !errors.As(err, &nd) || !nd.Running {
		t.Errorf("insert into a running VM without a drive: %v; want a NoCDROMError, running", err)
	}
}

// A start checks the ISO again: it may have gone since the apply.
func TestStartChecksISO(t *testing.T) {
	m, _ := cdromManager(t)
	iso := testISO(t, t.TempDir(), "gone.iso")
	spec := kernelVM("inst", testKernel(t))
	spec.Spec.CDROM = &CDROM{ISO: iso}
	mustCreate(t, m, spec)
	os.Remove(iso)
	err := m.Start(context.Background(), "inst")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `spec.cdrom.iso: no such file (got "`+iso+`")`) {
		t.Errorf("start with the ISO gone: %v; want spec.cdrom.iso: no such file naming it", err)
	}
}

func TestDisplay(t *testing.T) {
	m, host := cdromManager(t)
	ctx := context.Background()
	mustCreate(t, m, kernelVM("plain", testKernel(t)))
	var nd *NoDisplayError
	if _, err := m.Display(ctx, "plain"); !errors.As(err, &nd) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.display is unset") {
		t.Errorf("display of a VM without one: %v; want a NoDisplayError", err)
	}
	spec := kernelVM("gfx", testKernel(t))
	spec.Spec.Display = DisplayVNC
	v := mustCreate(t, m, spec)
	uid := v.Metadata.UID
	d, err := m.Display(ctx, "gfx")
	if err != nil {
		t.Fatal(err)
	}
	sock := m.runPath(uid, vncSockName)
	if d.Socket != sock || d.Serving || d.RestartNeeded || d.Type != "vnc" {
		t.Errorf("stopped VM's display = %+v; want socket %s, not serving", d, sock)
	}
	if got, want := d.SSHTunnel("root@kvm1", 5901), "ssh -N -L 5901:"+sock+" root@kvm1"; got != want {
		t.Errorf("SSHTunnel = %q; want %q", got, want)
	}

	startFakeQEMU(t, m, host, uid, nil)
	if d, _ = m.Display(ctx, "gfx"); d.Serving || !d.RestartNeeded {
		t.Errorf("running without the socket = %+v; want a restart needed", d)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if d, _ = m.Display(ctx, "gfx"); !d.Serving || d.RestartNeeded {
		t.Errorf("running with the socket = %+v; want serving", d)
	}
}

// A manifest from the director (CreateOptions.Remote) may put in the CD
// drive only an ISO inside the host's images directory: not any ISO on
// the host, such as another VM's seed with its user data.
func TestRemoteCreateCDROM(t *testing.T) {
	m, _ := cdromManager(t)
	ctx := context.Background()
	victim := kernelVM("victim", testKernel(t))
	victim.Spec.CloudInit = &CloudInit{UserData: "#cloud-config\npassword: s3cret\n"}
	mustCreate(t, m, victim)
	images := m.layout().ImagesDir()
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	inside := testISO(t, images, "installer.iso")
	outside := testISO(t, t.TempDir(), "elsewhere.iso")
	link := filepath.Join(images, "link.iso")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(m.layout().VMStateDir(victim.Metadata.UID), "seed.iso")
	if err := os.MkdirAll(filepath.Dir(seed), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeSeed(seed, victim); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		iso string
		ok  bool
	}{{inside, true}, {outside, false}, {link, false}, {seed, false}} {
		v := &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "r" + string(rune('a'+i))},
			Spec: Spec{CDROM: &CDROM{ISO: tc.iso}}}
		_, err := m.CreateWith(ctx, v, CreateOptions{Remote: true})
		if tc.ok != (err == nil) {
			t.Errorf("remote create with cdrom %s: %v; want ok %v", tc.iso, err, tc.ok)
		}
		if !tc.ok && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.cdrom.iso") || !strings.Contains(err.Error(), "images directory")) {
			t.Errorf("remote create with cdrom %s: %v; want spec.cdrom.iso named, the images directory", tc.iso, err)
		}
	}
}
