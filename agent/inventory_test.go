package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// invRig is a VM manager under a temporary root with a fake /proc (its
// host root), so that a "running" VM is a fake /proc entry plus QMP
// sockets the test serves: no QEMU.
type invRig struct {
	t      *testing.T
	root   string
	host   string
	layout paths.Layout
	vms    *vm.Manager
	kernel string
}

func newInvRig(t *testing.T) *invRig {
	t.Helper()
	// socket paths must fit in 107 bytes: no test name in the root
	root, err := os.MkdirTemp("", "inv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(kernel, []byte("not a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := paths.New(root)
	m := vm.NewManager(vm.Options{
		Layout: l, HostRoot: host,
		QEMU: filepath.Join(root, "no-such-qemu"), QEMUImg: filepath.Join(root, "no-such-qemu-img"),
		Limits: &vm.Limits{CPUs: 4, MemoryMiB: 4096},
		Accel:  func(context.Context) (string, string) { return "tcg", "test" },
	})
	return &invRig{t: t, root: root, host: host, layout: l, vms: m, kernel: kernel}
}

func (r *invRig) create(name string) *vm.VirtualMachine {
	r.t.Helper()
	v, err := r.vms.Create(context.Background(), &vm.VirtualMachine{APIVersion: vm.APIVersion, Kind: vm.Kind,
		Metadata: vm.Metadata{Name: name}, Spec: vm.Spec{Boot: &vm.Boot{Kernel: r.kernel, Cmdline: "console=ttyS0"}}})
	if err != nil {
		r.t.Fatalf("create %s: %v", name, err)
	}
	return v
}

// fakeVMProc is a "running QEMU" for uid: a fake /proc entry, a pidfile,
// a QMP monitor answering query-status and an events socket the test
// sends events on.
type fakeVMProc struct {
	t      *testing.T
	proc   string
	runDir string
	lns    []net.Listener

	// slowGreet delays the events socket's first greeting (QEMU not in
	// its main loop yet)
	slowGreet time.Duration
	// quitExits: QMP quit on the monitor socket makes the QEMU exit (its
	// /proc entry goes); qmp lists the monitor socket's commands but the
	// handshake, in order
	quitExits bool
	qmp       []string

	mu     sync.Mutex
	conns  []net.Conn
	evConn net.Conn
	evUp   chan struct{}
	wg     sync.WaitGroup
}

func (r *invRig) start(uid string, pid int) *fakeVMProc { return r.startSlow(uid, pid, 0) }

func (r *invRig) startSlow(uid string, pid int, slowGreet time.Duration) *fakeVMProc {
	r.t.Helper()
	f := &fakeVMProc{t: r.t, proc: filepath.Join(r.host, "proc", strconv.Itoa(pid)), runDir: r.layout.VMRunDir(uid), evUp: make(chan struct{}), slowGreet: slowGreet}
	if err := os.MkdirAll(f.proc, 0o755); err != nil {
		r.t.Fatal(err)
	}
	argv := []string{"qemu-system-x86_64", "-name", "guest=x", "-uuid", uid, "-pidfile", filepath.Join(f.runDir, "qemu.pid")}
	writeTestFile(r.t, filepath.Join(f.proc, "cmdline"), strings.Join(argv, "\x00")+"\x00")
	writeTestFile(r.t, filepath.Join(f.proc, "stat"), fmt.Sprintf("%d (qemu-system-x86) S 1 1 1 0", pid))
	if err := os.MkdirAll(f.runDir, 0o700); err != nil {
		r.t.Fatal(err)
	}
	writeTestFile(r.t, filepath.Join(f.runDir, "qemu.pid"), strconv.Itoa(pid)+"\n")
	f.listen(filepath.Join(f.runDir, "qmp.sock"), false)
	f.listen(filepath.Join(f.runDir, eventsSocketName), true)
	r.t.Cleanup(f.stop)
	return f
}

func writeTestFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeVMProc) listen(path string, events bool) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		f.t.Fatal(err)
	}
	f.lns = append(f.lns, ln)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.serve(c, events)
			}()
		}
	}()
}

func (f *fakeVMProc) serve(c net.Conn, events bool) {
	if events {
		f.mu.Lock()
		d := f.slowGreet
		f.slowGreet = 0
		f.mu.Unlock()
		time.Sleep(d)
	}
	fmt.Fprintln(c, `{"QMP":{"version":{"qemu":{"major":7,"minor":2,"micro":0},"package":""},"capabilities":[]}}`)
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var cmd struct {
			Execute string `json:"execute"`
		}
		if json.Unmarshal(sc.Bytes(), &cmd) != nil {
			continue
		}
		if !events && cmd.Execute != "qmp_capabilities" {
			f.mu.Lock()
			f.qmp = append(f.qmp, cmd.Execute)
			quit := f.quitExits && cmd.Execute == "quit"
			f.mu.Unlock()
			if quit {
				fmt.Fprintln(c, `{"return":{}}`)
				os.RemoveAll(f.proc)
				return
			}
		}
		switch cmd.Execute {
		case "query-status":
			fmt.Fprintln(c, `{"return":{"status":"running","running":true,"singlestep":false}}`)
		default:
			fmt.Fprintln(c, `{"return":{}}`)
		}
		if events && cmd.Execute == "qmp_capabilities" {
			f.mu.Lock()
			if f.evConn == nil {
				f.evConn = c
				close(f.evUp)
			}
			f.mu.Unlock()
		}
	}
}

// event sends a QMP event on the events connection (waiting for the
// agent to connect).
func (f *fakeVMProc) event(name string) {
	f.t.Helper()
	select {
	case <-f.evUp:
	case <-time.After(2 * time.Second):
		f.t.Fatal("nobody connected to the QMP events socket")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.evConn, `{"event":%q,"timestamp":{"seconds":1,"microseconds":0}}`+"\n", name)
}

// stop is QEMU exiting: the sockets close, the /proc entry and the run
// files go.
func (f *fakeVMProc) stop() {
	for _, ln := range f.lns {
		ln.Close()
	}
	f.lns = nil
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
	os.RemoveAll(f.proc)
	for _, n := range []string{"qemu.pid", "qmp.sock", eventsSocketName} {
		os.Remove(filepath.Join(f.runDir, n))
	}
}

// deltaWaiter reads deltas, checking epoch and generation continuity.
type deltaWaiter struct {
	t     *testing.T
	iv    *inventory
	epoch string
	gen   uint64
	state map[string]*directorv1.InventoryVM
}

func newDeltaWaiter(t *testing.T, iv *inventory, full *directorv1.Inventory) *deltaWaiter {
	w := &deltaWaiter{t: t, iv: iv, epoch: full.Epoch, gen: full.Generation, state: map[string]*directorv1.InventoryVM{}}
	for _, v := range full.Vms {
		w.state[v.Uid] = v
	}
	return w
}

// until applies deltas until ok holds of the state, failing after within.
func (w *deltaWaiter) until(what string, within time.Duration, ok func(map[string]*directorv1.InventoryVM) bool) {
	w.t.Helper()
	deadline := time.After(within)
	for !ok(w.state) {
		select {
		case d := <-w.iv.Deltas():
			if d.Epoch != w.epoch || d.Generation != w.gen+1 {
				w.t.Fatalf("delta epoch %s generation %d; want epoch %s generation %d", d.Epoch, d.Generation, w.epoch, w.gen+1)
			}
			w.gen = d.Generation
			for _, v := range d.Upserts {
				w.state[v.Uid] = v
			}
			for _, u := range d.RemovedUids {
				delete(w.state, u)
			}
		case <-deadline:
			w.t.Fatalf("%s: no delta within %s; state %v", what, within, w.state)
		}
	}
}

func phaseIs(uid, phase string) func(map[string]*directorv1.InventoryVM) bool {
	return func(s map[string]*directorv1.InventoryVM) bool { v, ok := s[uid]; return ok && v.Phase == phase }
}

// Deltas come from inotify and QMP events within a second, with the
// reconciliation an hour away; a reconciliation afterwards finds nothing
// the events missed.
func TestInventoryDeltasFromEvents(t *testing.T) {
	r := newInvRig(t)
	web := r.create("web")
	iv := newInventory(r.vms, r.layout, nil)
	iv.reconcileEvery = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { iv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	full, err := iv.Full(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if full.ResyncId != "r1" || len(full.Vms) != 1 || full.Vms[0].Uid != web.Metadata.UID || full.Vms[0].Phase != vm.PhaseStopped {
		t.Fatalf("full: got %v; want web Stopped answering r1", full)
	}
	w := newDeltaWaiter(t, iv, full)
	uid := web.Metadata.UID

	db := r.create("db")
	w.until("create db", time.Second, phaseIs(db.Metadata.UID, vm.PhaseStopped))

	q := r.start(uid, 4242)
	w.until("start web", time.Second, phaseIs(uid, vm.PhaseRunning))
	q.event("STOP")
	w.until("STOP event", time.Second, phaseIs(uid, vm.PhasePaused))
	q.event("RESUME")
	w.until("RESUME event", time.Second, phaseIs(uid, vm.PhaseRunning))
	q.stop()
	w.until("web's QEMU gone", time.Second, phaseIs(uid, vm.PhaseStopped))

	if err := r.vms.Delete(ctx, "db", false); err != nil {
		t.Fatal(err)
	}
	w.until("delete db", time.Second, func(s map[string]*directorv1.InventoryVM) bool { _, ok := s[db.Metadata.UID]; return !ok })

	if n, err := iv.reconcile(ctx); err != nil || n != 0 {
		t.Errorf("reconcile after the events: got %d changes, %v; want 0", n, err)
	}
	if n := iv.reconcileChanges.Load(); n != 0 {
		t.Errorf("reconcile changes counted: got %d; want 0", n)
	}
}

// An events socket that greets only after the handshake's timeout (QEMU
// not in its main loop yet) is dialled again, and its events are seen.
func TestInventoryEventsSlowGreeting(t *testing.T) {
	r := newInvRig(t)
	uid := r.create("web").Metadata.UID
	iv := newInventory(r.vms, r.layout, nil)
	iv.reconcileEvery = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { iv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	full, err := iv.Full(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	w := newDeltaWaiter(t, iv, full)
	q := r.startSlow(uid, 4444, eventsDialTimeout+500*time.Millisecond)
	w.until("start", time.Second, phaseIs(uid, vm.PhaseRunning))
	select {
	case <-q.evUp:
	case <-time.After(2*eventsDialTimeout + 2*time.Second):
		t.Fatal("the events socket was not dialled again after a handshake timeout")
	}
	q.event("STOP")
	w.until("STOP event", time.Second, phaseIs(uid, vm.PhasePaused))
}

// A reconciliation corrects a phase the events got wrong (a RESUME lost
// from a full buffer): QMP's answer wins over the events' phase, and the
// change goes out as a delta.
func TestInventoryReconcileCorrectsPhase(t *testing.T) {
	r := newInvRig(t)
	uid := r.create("web").Metadata.UID
	iv := newInventory(r.vms, r.layout, nil)
	iv.reconcileEvery = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { iv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	full, err := iv.Full(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	w := newDeltaWaiter(t, iv, full)
	q := r.start(uid, 4343) // its monitor answers query-status "running"
	w.until("start", time.Second, phaseIs(uid, vm.PhaseRunning))
	q.event("STOP") // and the RESUME that followed was lost
	w.until("STOP event", time.Second, phaseIs(uid, vm.PhasePaused))
	n, err := iv.reconcile(ctx)
	if err != nil || n != 1 {
		t.Fatalf("reconcile: got %d changes, %v; want 1 (Paused -> Running from QMP)", n, err)
	}
	w.until("reconcile", time.Second, phaseIs(uid, vm.PhaseRunning))
	if n, err := iv.reconcile(ctx); err != nil || n != 0 {
		t.Errorf("a second reconcile: got %d changes, %v; want 0", n, err)
	}
}

// A director-created VM's label value is reported as it is stored; a
// local spec edit bumps the host's generation only, seen by inotify.
func TestInventoryTwoGenerations(t *testing.T) {
	r := newInvRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := r.vms.CreateWith(ctx, &vm.VirtualMachine{APIVersion: vm.APIVersion, Kind: vm.Kind,
		Metadata: vm.Metadata{Name: "web"}, Spec: vm.Spec{Boot: &vm.Boot{Kernel: r.kernel}}}, vm.CreateOptions{DirectorGeneration: "7"})
	if err != nil {
		t.Fatal(err)
	}
	iv := newInventory(r.vms, r.layout, nil)
	iv.reconcileEvery = time.Hour
	done := make(chan struct{})
	go func() { iv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	full, err := iv.Full(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Vms) != 1 || full.Vms[0].DirectorGeneration != "7" || full.Vms[0].Generation != 1 {
		t.Fatalf("full: got %v; want web at generation 1, director generation 7", full.Vms)
	}
	w := newDeltaWaiter(t, iv, full)
	edit := &vm.VirtualMachine{APIVersion: vm.APIVersion, Kind: vm.Kind, Metadata: vm.Metadata{Name: "web", UID: v.Metadata.UID},
		Spec: vm.Spec{CPUs: 2, Boot: &vm.Boot{Kernel: r.kernel}}}
	if _, err := r.vms.Apply(ctx, edit); err != nil {
		t.Fatal(err)
	}
	uid := v.Metadata.UID
	w.until("local apply", time.Second, func(s map[string]*directorv1.InventoryVM) bool { return s[uid].Generation == 2 })
	if got := w.state[uid]; got.DirectorGeneration != "7" || got.Cpus != 2 {
		t.Errorf("after a local apply: got %v; want director generation 7, 2 cpus", got)
	}
}

// A Full supersedes the deltas not yet taken, and the next delta follows
// its generation.
func TestInventoryFullDrainsDeltas(t *testing.T) {
	r := newInvRig(t)
	iv := newInventory(r.vms, r.layout, nil)
	ctx := context.Background()
	if _, err := iv.Full(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	r.create("web")
	if n, err := iv.reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("reconcile: got %d, %v; want 1 change", n, err)
	}
	full, err := iv.Full(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if full.Generation != 1 || len(full.Vms) != 1 {
		t.Fatalf("full: generation %d, %d VMs; want 1, 1", full.Generation, len(full.Vms))
	}
	select {
	case d := <-iv.Deltas():
		t.Fatalf("a delta survived the Full: %v", d)
	default:
	}
	r.create("db")
	if _, err := iv.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	d := <-iv.Deltas()
	if d.Generation != full.Generation+1 || d.Epoch != full.Epoch {
		t.Errorf("delta after the Full: generation %d epoch %s; want %d %s", d.Generation, d.Epoch, full.Generation+1, full.Epoch)
	}
	if n := iv.reconcileChanges.Load(); n != 2 {
		t.Errorf("reconcile changes: got %d; want 2", n)
	}
}

// A store that cannot be listed is an error, never an empty inventory.
func TestInventoryFullFailsClosed(t *testing.T) {
	r := newInvRig(t)
	r.create("web")
	// a store that is not a directory cannot be listed, even by root
	vmsDir := filepath.Join(r.layout.StateDir(), "vms")
	if err := os.RemoveAll(vmsDir); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, vmsDir, "not a directory")
	iv := newInventory(r.vms, r.layout, nil)
	if inv, err := iv.Full(context.Background(), "x"); err == nil {
		t.Fatalf("Full: got %v, nil; want an error", inv)
	}
}

// What the director is told of a row: no message, no path.
func TestInventoryVMCarriesNoPaths(t *testing.T) {
	tests := []struct {
		name string
		in   vm.Entry
		want *directorv1.InventoryVM
	}{
		{"managed", vm.Entry{Name: "web", UID: "u1", Class: vm.ClassManaged, Phase: vm.PhaseRunning, CPUs: 2, MemoryMiB: 512,
			Generation: 3, ObservedGeneration: 2, Message: "QMP: qmp /run/virtcon/vms/u1/qmp.sock: busy", StartedAt: time.UnixMilli(1700)},
			&directorv1.InventoryVM{Uid: "u1", Name: "web", Class: vm.ClassManaged, Phase: vm.PhaseRunning, Cpus: 2, MemoryMib: 512,
				Generation: 3, ObservedGeneration: 2, StartedAtUnixMs: 1700}},
		{"orphan dir", vm.Entry{UID: "u2", Class: vm.ClassOrphaned, Phase: vm.PhaseStopped, Path: "/var/lib/virtcon/vms/u2",
			Message: "volumes without a VM spec: /var/lib/virtcon/vms/u2"},
			&directorv1.InventoryVM{Uid: "u2", Class: vm.ClassOrphaned, Phase: vm.PhaseStopped, Reason: "volumes without a VM spec"}},
		{"external", vm.Entry{Name: "ext", UID: "u3", Class: vm.ClassExternal, Phase: vm.PhaseRunning, Source: "libvirt", Message: "not managed"},
			&directorv1.InventoryVM{Uid: "u3", Name: "ext", Class: vm.ClassExternal, Phase: vm.PhaseRunning, Source: "libvirt"}},
		{"unreadable", vm.Entry{UID: "u4", Class: vm.ClassUnreadable, Phase: vm.PhaseUnknown, Message: "spec unreadable: /x/spec.yaml: bad"},
			&directorv1.InventoryVM{Uid: "u4", Class: vm.ClassUnreadable, Phase: vm.PhaseUnknown, Reason: "spec unreadable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inventoryVM(tt.in)
			if !proto.Equal(got, tt.want) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
	tap := inventoryVM(vm.Entry{Class: vm.ClassOrphaned, Path: "tap:vt1234", Message: "TAP device of no running VM: tap:vt1234"})
	if !strings.HasPrefix(tap.Uid, "orphan-") || strings.Contains(tap.String(), "vt1234") {
		t.Errorf("a TAP orphan: got %v; want a stable orphan- key and no path", tap)
	}
}
