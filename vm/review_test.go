package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/qmp"
)

// qmpServer is a QEMU stand-in on a VM's QMP socket: it greets, answers
// qmp_capabilities, and answers every other command with reply(name),
// recording the names in order.
type qmpServer struct {
	mu       sync.Mutex
	commands []string
}

func serveQMP(t *testing.T, path string, reply func(cmd string) any) *qmpServer {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &qmpServer{}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.serve(c, reply)
		}
	}()
	return s
}

func (s *qmpServer) serve(c net.Conn, reply func(string) any) {
	defer c.Close()
	enc := json.NewEncoder(c)
	enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{"qemu": map[string]int{"major": 7, "minor": 2, "micro": 0}}, "capabilities": []string{}}})
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var req struct {
			Execute string `json:"execute"`
			ID      any    `json:"id"`
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil {
			return
		}
		var ret any = map[string]any{}
		if req.Execute != "qmp_capabilities" {
			s.mu.Lock()
			s.commands = append(s.commands, req.Execute)
			s.mu.Unlock()
			if r := reply(req.Execute); r != nil {
				ret = r
			}
		}
		enc.Encode(map[string]any{"return": ret, "id": req.ID})
	}
}

func (s *qmpServer) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// The ACPI button reaches a guest only while its vCPUs run: a paused guest
// is resumed first, one suspended to RAM woken, one that never ran is not
// pressed at all (issue 9, item 9).
func TestPowerdownResumesFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status string
		want   []string
		err    error
	}{
		{"running", []string{"query-status", "system_powerdown"}, nil},
		{"paused", []string{"query-status", "cont", "system_powerdown"}, nil},
		{"suspended", []string{"query-status", "system_wakeup", "system_powerdown"}, nil},
		{"prelaunch", []string{"query-status"}, errNoGuest},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(shortTempDir(t), "q.sock")
			srv := serveQMP(t, path, func(cmd string) any {
				if cmd == "query-status" {
					return map[string]any{"status": tt.status, "running": tt.status == "running"}
				}
				return nil
			})
			ctx := context.Background()
			mon, err := qmp.Dial(ctx, path, qmp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mon.Close()
			if err := powerdown(ctx, mon); !errors.Is(err, tt.err) {
				t.Errorf("powerdown: got %v; want %v", err, tt.err)
			}
			if got := srv.got(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("QMP commands: got %v; want %v", got, tt.want)
			}
		})
	}
}

// QEMU tells whether a client holds the serial socket: its chardev's
// filename reads "disconnected:..." while free (issue 9, item 11).
func TestSerialConnected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filename string
		busy     bool
		err      bool
	}{
		{"disconnected:unix:/run/virtcon/vms/x/serial.sock,server=on", false, false},
		{"unix:/run/virtcon/vms/x/serial.sock,server=on", true, false},
		{"", false, true}, // no such chardev
	}
	for _, tt := range tests {
		m, _, _ := newTestManager(t)
		serveQMP(t, m.runPath(testUID, qmpSockName), func(cmd string) any {
			if cmd != "query-chardev" {
				return nil
			}
			devs := []map[string]any{{"label": "qga0", "filename": "disconnected:unix:/q", "frontend-open": false}}
			if tt.filename != "" {
				devs = append(devs, map[string]any{"label": serialChardev, "filename": tt.filename, "frontend-open": true})
			}
			return devs
		})
		busy, err := m.serialConnected(context.Background(), testUID)
		if busy != tt.busy || (err != nil) != tt.err {
			t.Errorf("%q: got busy %v, err %v; want busy %v, error %v", tt.filename, busy, err, tt.busy, tt.err)
		}
	}
}

// A second virtcon console on the same VM is refused by the lock, naming
// the holder from its record, before QEMU is asked anything.
func TestConsoleBusyByLock(t *testing.T) {
	t.Parallel()
	m, _, host := newTestManager(t)
	vm := mustCreate(t, m, kernelVM("c1", testKernel(t)))
	uid := vm.Metadata.UID
	// the VM "runs": a fake QEMU process carrying its UUID
	fakeProc(t, filepath.Join(host, "proc"), 4242, "S", qemuArgv(uid)...)
	if err := os.MkdirAll(m.layout().VMRunDir(uid), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.runPath(uid, pidFileName), []byte("4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := flock.Acquire(context.Background(), m.runPath(uid, consoleLockName))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	rec, _ := json.Marshal(ConsoleHolder{PID: os.Getpid(), User: "alice", TTY: "pts/7"})
	if err := os.WriteFile(m.runPath(uid, consoleHolderName), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	attached := false
	err = m.Console(context.Background(), "c1", strings.NewReader(""), &strings.Builder{}, func(*VirtualMachine) { attached = true })
	var busy *ConsoleBusyError
	if !errors.As(err, &busy) || !errors.Is(err, ErrConsoleBusy) || busy.Holder == nil || busy.Holder.User != "alice" || attached {
		t.Fatalf("Console while held: got %v (attached %v); want ConsoleBusyError naming alice, nothing attached", err, attached)
	}
	if !strings.Contains(err.Error(), "alice on pts/7") {
		t.Errorf("error %q; want it to name alice on pts/7", err)
	}
}

// Duplicate names, which older versions let in, are an error naming both
// UIDs, never a pick of the first.
func TestFindDuplicateNames(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	a := mustCreate(t, m, kernelVM("k1", testKernel(t)))
	dup := kernelVM("K1", "/k")
	Defaults(dup)
	dup.Metadata.UID = "00000000-0000-4000-8000-0000000000d1"
	if err := m.store.save(dup); err != nil {
		t.Fatal(err)
	}
	_, err := m.find("k1")
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), a.Metadata.UID) || !strings.Contains(err.Error(), dup.Metadata.UID) {
		t.Errorf("find(k1) with a duplicate: got %v; want ErrAmbiguous naming both UIDs", err)
	}
	if err := m.Delete(context.Background(), "k1", true); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("Delete(k1): got %v; want ErrAmbiguous", err)
	}
	if vm, err := m.find(dup.Metadata.UID); err != nil || vm.Metadata.UID != dup.Metadata.UID {
		t.Errorf("find by UID: got %v, %v", vm, err)
	}
}

// A guest that is not ours does not stop virt apply from creating a VM of
// the same name (vm create never did).
func TestApplyBesideExternalOfSameName(t *testing.T) {
	t.Parallel()
	f := newHostFixture(t)
	res, err := f.m.Apply(context.Background(), kernelVM("ext", testKernel(t)))
	if err != nil || res.Action != "created" {
		t.Fatalf("Apply(ext) beside an EXTERNAL ext: got %+v, %v; want created", res, err)
	}
}

// The end-of-spec line counts only at column 0: user data holding the same
// text, indented in its block scalar, does not make a cut spec whole.
func TestSpecTrailerInUserData(t *testing.T) {
	t.Parallel()
	s := store{layout: newTestLayout(t)}
	vm := kernelVM("ud", "/k")
	Defaults(vm)
	vm.Metadata.UID = testUID
	vm.Spec.CloudInit = &CloudInit{UserData: "#cloud-config\n" + specTrailer + "runcmd: [true]\n"}
	if err := s.save(vm); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.specPath(testUID))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), strings.TrimSpace(specTrailer))
	if i < 0 || i == len(b)-len(specTrailer) {
		t.Fatalf("the user data's trailer-like line is not in the spec:\n%s", b)
	}
	cut := b[:strings.IndexByte(string(b[i:]), '\n')+i+1] // just after the user data's line
	if err := os.WriteFile(s.specPath(testUID), cut, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.load(testUID); err == nil {
		t.Errorf("load of a spec cut after a trailer-like user-data line: got nil; want cut short\n%s", cut)
	}
}

// A running VM whose spec cannot be read still owns its TAPs: they are not
// listed as orphans (QEMU names them on its command line).
func TestUnreadableVMKeepsItsTAPs(t *testing.T) {
	t.Parallel()
	base, _, host := newTestManager(t)
	fn := &fakeNet{taps: map[string]bool{}}
	opts := base.opts
	opts.Net = fn
	m := NewManager(opts)
	vm := mustCreate(t, m, kernelVM("n1", testKernel(t)))
	uid := vm.Metadata.UID
	tap := m.opts.Net.TAPName(uid, 0)
	fakeProc(t, filepath.Join(host, "proc"), 4343, "S", append(qemuArgv(uid), "-netdev", "tap,id=net0,ifname="+tap+",script=no,downscript=no")...)
	if err := os.WriteFile(m.store.specPath(uid), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn.taps[tap] = true
	fn.taps["vcffffffff0"] = true // nobody's
	entries, _ := m.List(context.Background())
	var orphanTAPs []string
	for _, e := range entries {
		if strings.HasPrefix(e.Path, tapPrefix) {
			orphanTAPs = append(orphanTAPs, e.Path)
		}
	}
	if len(orphanTAPs) != 1 || orphanTAPs[0] != tapPrefix+"vcffffffff0" {
		t.Errorf("orphaned TAPs: got %v; want only tap:vcffffffff0 (the unreadable VM's %s is in use)", orphanTAPs, tap)
	}
}

// fakeNet is the host network as the VM runtime sees it, without netlink.
type fakeNet struct{ taps map[string]bool }

func (f *fakeNet) TAPName(uid string, i int) string {
	return defaultHostNet(paths.Layout{}).TAPName(uid, i)
}
func (f *fakeNet) CreateTAP(context.Context, string, string, int) error        { return nil }
func (f *fakeNet) DeleteTAP(context.Context, string) error                     { return nil }
func (f *fakeNet) BridgeFor(string) (string, error)                            { return "", ErrNotFound }
func (f *fakeNet) Addresses(context.Context, string) ([]string, string, error) { return nil, "", nil }
func (f *fakeNet) ListTAPs(context.Context) ([]string, error) {
	var out []string
	for t := range f.taps {
		out = append(out, t)
	}
	return out, nil
}

// An image whose marker cannot be read is not a free name: importing over
// it would swap the base under every overlay. Nor is an unmarked image
// file that a VM's overlay still uses.
func TestImportOverUnreadableImageRefused(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	ctx := context.Background()
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	src := filepath.Join(t.TempDir(), "b.raw")
	if err := os.WriteFile(src, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ImportImage(ctx, src, "base"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(m.imagePath("base"))
	if err := os.WriteFile(m.markerPath("base"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.raw")
	if err := os.WriteFile(other, []byte(strings.Repeat("x", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ImportImage(ctx, other, "base"); err == nil {
		t.Error("import over an image with a corrupt marker: accepted")
	}
	if after, _ := os.ReadFile(m.imagePath("base")); string(after) != string(before) {
		t.Error("the base image's content was replaced")
	}

	// an unmarked image file that a VM's overlay uses
	if err := os.Remove(m.markerPath("base")); err != nil {
		t.Fatal(err)
	}
	dir := m.layout().VMStateDir("00000000-0000-4000-8000-0000000000e1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", m.imagePath("base"), filepath.Join(dir, "disk-root.qcow2")).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	if _, err := m.ImportImage(ctx, other, "base"); !errors.Is(err, ErrInUse) {
		t.Errorf("import over an unmarked base that an overlay uses: got %v; want ErrInUse", err)
	}
	if after, _ := os.ReadFile(m.imagePath("base")); string(after) != string(before) {
		t.Error("the unmarked base in use was replaced")
	}
}

// The core's rules for entries and image references.
func TestEntryRulesAndImageRefs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		e                   Entry
		actionable, running bool
	}{
		{Entry{Class: ClassManaged, Phase: PhaseStopped}, true, false},
		{Entry{Class: ClassManaged, Phase: PhaseRunning, PID: 3}, true, true},
		{Entry{Class: ClassManaged, Phase: PhaseUnresponsive}, true, true},
		{Entry{Class: ClassMissing, Phase: PhaseStopped}, true, false},
		{Entry{Class: ClassExternal, Phase: PhaseRunning, PID: 9}, false, true},
		{Entry{Class: ClassExternal, Phase: PhaseRunning}, false, false},
		{Entry{Class: ClassOrphaned, Phase: PhaseStopped}, false, false},
		{Entry{Class: ClassUnreadable, Phase: PhaseUnknown}, false, false},
	} {
		if tt.e.Actionable() != tt.actionable || tt.e.Running() != tt.running {
			t.Errorf("%+v: actionable %v running %v; want %v %v", tt.e, tt.e.Actionable(), tt.e.Running(), tt.actionable, tt.running)
		}
	}
	for ref, url := range map[string]bool{"debian-12": false, "https://x/y.qcow2": true, "http://x/y": true, "ftp://x/y": false} {
		if IsImageURL(ref) != url {
			t.Errorf("IsImageURL(%q) = %v", ref, !url)
		}
	}
	a, b := URLImageName("https://x/a.img"), URLImageName("https://x/b.img")
	if a == b || a != URLImageName("https://x/a.img") || ValidateName("image", a) != nil {
		t.Errorf("URLImageName: %q %q; want stable, distinct, valid names", a, b)
	}
	m, _, _ := newTestManager(t)
	if name, pulled, err := m.EnsureImage(context.Background(), "debian-12", nil); name != "debian-12" || pulled != nil || err != nil {
		t.Errorf("EnsureImage(name) = %q, %v, %v", name, pulled, err)
	}
	if got := m.SerialLogPath(testUID); filepath.Dir(filepath.Dir(got)) != m.SerialLogDir() {
		t.Errorf("SerialLogPath %s is not under SerialLogDir %s", got, m.SerialLogDir())
	}
}
