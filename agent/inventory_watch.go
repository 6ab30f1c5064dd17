package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/vm"
)

// What the watcher listens to, without polling a managed VM:
//   - inotify on <state>/vms (VMs created or deleted by anyone), on each
//     VM's state dir (a spec rewrite is an atomic rename: generation and
//     label changes), on <run>/vms and each VM's run dir (a run dir and
//     its sockets appear when QEMU starts, the pidfile goes at a stop);
//   - per running MANAGED VM one connection to its QMP events socket (the
//     second -qmp socket; a QMP socket serves one client, and the agent is
//     this one's reader: `virt vm events` reads the third, the watch
//     socket), through vm.FollowEvents, the reader `virt vm events` uses:
//     STOP, RESUME, SUSPEND, SHUTDOWN give the live phase, and its end
//     says the process is gone.
//
// Each of these marks one VM; marked VMs are looked at again (Peek, not
// QMP) coalesceWindow later and what changed goes out as one delta.

// eventsSocketName is the VM's QMP events socket in its run dir (vm's
// Launch.EvtSocket).
const eventsSocketName = "qmp-events.sock"

// eventsDialTimeout bounds one QMP handshake on the events socket;
// eventsDialFor is how long a socket that does not answer is tried.
const (
	eventsDialTimeout = 2 * time.Second
	eventsDialFor     = 30 * time.Second
)

const (
	dirMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_ONLYDIR
	vmMask  = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CLOSE_WRITE |
		unix.IN_DELETE_SELF | unix.IN_ONLYDIR
)

// watchKind tells what an inotify watch descriptor is on.
type watchKind int

const (
	watchStateVMs watchKind = iota // <state>/vms
	watchRunVMs                    // <run>/vms
	watchStateVM                   // <state>/vms/<uid>
	watchRunVM                     // <run>/vms/<uid>
)

type watchTarget struct {
	kind watchKind
	uid  string
}

// watcher is one Run's inotify instance and QMP event connections.
type watcher struct {
	iv *inventory
	fd int
	f  *os.File

	readDone chan struct{} // read has returned
	overflow chan struct{} // cap 1: inotify lost events; Run reconciles

	mu     sync.Mutex
	wds    map[int32]watchTarget
	byPath map[string]int32
	events map[string]context.CancelFunc // uid → its events reader
	wg     sync.WaitGroup
}

// Run watches the host and makes deltas until ctx ends. Without inotify
// (it cannot be set up) only the reconciliation runs, and that is logged.
func (iv *inventory) Run(ctx context.Context) {
	w, err := iv.newWatcher()
	var overflow <-chan struct{}
	if err != nil {
		iv.log.Warn("inventory: no inotify: VM changes are reported by the reconciliation only", "every", iv.reconcileEvery, "err", err)
	} else {
		defer w.close()
		go w.read(ctx)
		w.scan(ctx)
		overflow = w.overflow
	}
	tick := time.NewTicker(iv.reconcileEvery)
	defer tick.Stop()
	var flush <-chan time.Time
	var flushTimer *time.Timer
	for {
		select {
		case <-ctx.Done():
			if flushTimer != nil {
				flushTimer.Stop()
			}
			return
		case <-iv.kick:
			if flushTimer == nil {
				flushTimer = time.NewTimer(iv.coalesce)
				flush = flushTimer.C
			}
		case <-flush:
			flushTimer, flush = nil, nil
			if again := iv.flush(ctx, w); again {
				// the session is not taking deltas: keep them pending
				flushTimer = time.NewTimer(time.Second)
				flush = flushTimer.C
			}
		case <-overflow:
			// events were lost: look at everything
			iv.log.Info("inventory: inotify queue overflowed; listing every VM")
			if _, err := iv.reconcile(ctx); err != nil && ctx.Err() == nil {
				iv.log.Warn("inventory: reconcile", "err", err)
			}
		case <-tick.C:
			if _, err := iv.reconcile(ctx); err != nil && ctx.Err() == nil {
				iv.log.Warn("inventory: reconcile", "err", err)
			}
		}
	}
}

// mark queues a VM to be looked at again.
func (iv *inventory) mark(uid string) {
	if uid == "" {
		return
	}
	iv.pmu.Lock()
	iv.pending[uid] = true
	iv.pmu.Unlock()
	select {
	case iv.kick <- struct{}{}:
	default:
	}
}

// setPhase records (or, with "", forgets) the live phase events gave.
func (iv *inventory) setPhase(uid, phase string) {
	iv.pmu.Lock()
	defer iv.pmu.Unlock()
	if phase == "" {
		delete(iv.phase, uid)
	} else {
		iv.phase[uid] = phase
	}
}

// flush looks at the pending VMs again and sends what changed as one
// delta. It reports true when the delta could not be queued (the changes
// stay pending).
func (iv *inventory) flush(ctx context.Context, w *watcher) (again bool) {
	iv.pmu.Lock()
	uids := iv.pending
	iv.pending = map[string]bool{}
	iv.pmu.Unlock()
	if len(uids) == 0 {
		return false
	}
	now := map[string]*directorv1.InventoryVM{}
	var listed map[string]*directorv1.InventoryVM
	for uid := range uids {
		e, err := iv.vms.Peek(ctx, uid)
		if err == nil && e.UID == uid {
			if e.PID > 0 && e.Phase == "" {
				e.Phase = vm.PhaseRunning // a QEMU that runs, its phase never stored
			}
			now[uid] = inventoryVM(*e)
			if w != nil {
				w.follow(ctx, uid, e)
			}
			continue
		}
		// gone, or not a VM of ours (an orphan's leftovers, an unreadable
		// spec): what `virt vm list` says of it
		if listed == nil {
			l, err := iv.list(ctx)
			if err != nil {
				iv.log.Warn("inventory: vm list", "err", err)
				iv.requeue(uids)
				return false
			}
			listed = l
		}
		if v, ok := listed[uid]; ok {
			now[uid] = v
		}
	}
	iv.overlayPhases(now, nil)

	iv.mu.Lock()
	defer iv.mu.Unlock()
	if !iv.full {
		return false // nothing reported yet: the first Full has it all
	}
	for uid, v := range now {
		// Peek does not ask QMP: a live VM it shows with the phase stored
		// at its start. The listing's (QMP) or the events' phase stays.
		if old, ok := iv.cur[uid]; ok && v.Class == vm.ClassManaged && livePhase(v.Phase) && livePhase(old.Phase) && !iv.hasPhase(uid) {
			v.Phase = old.Phase
		}
	}
	if len(iv.deltas) == cap(iv.deltas) {
		iv.requeue(uids)
		return true
	}
	up, rm := iv.diffLocked(now, uids)
	if len(up)+len(rm) > 0 {
		iv.emitLocked(up, rm)
	}
	return false
}

func (iv *inventory) hasPhase(uid string) bool {
	iv.pmu.Lock()
	defer iv.pmu.Unlock()
	_, ok := iv.phase[uid]
	return ok
}

func (iv *inventory) requeue(uids map[string]bool) {
	iv.pmu.Lock()
	for uid := range uids {
		iv.pending[uid] = true
	}
	iv.pmu.Unlock()
}

// newWatcher sets up inotify on <state>/vms and <run>/vms (made if
// missing, as vm makes them: 0700).
func (iv *inventory) newWatcher() (*watcher, error) {
	for _, d := range []string{filepath.Join(iv.l.StateDir(), "vms"), filepath.Join(iv.l.RunDir(), "vms")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("inventory: %w", err)
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inventory: inotify_init1: %w", err)
	}
	w := &watcher{iv: iv, fd: fd, f: os.NewFile(uintptr(fd), "inotify"), readDone: make(chan struct{}), overflow: make(chan struct{}, 1),
		wds: map[int32]watchTarget{}, byPath: map[string]int32{}, events: map[string]context.CancelFunc{}}
	if err := w.add(filepath.Join(iv.l.StateDir(), "vms"), dirMask, watchTarget{kind: watchStateVMs}); err != nil {
		w.f.Close()
		return nil, err
	}
	if err := w.add(filepath.Join(iv.l.RunDir(), "vms"), dirMask, watchTarget{kind: watchRunVMs}); err != nil {
		w.f.Close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) add(path string, mask uint32, t watchTarget) error {
	wd, err := unix.InotifyAddWatch(w.fd, path, mask)
	if err != nil {
		return fmt.Errorf("inventory: inotify watch %s: %w", path, err)
	}
	w.mu.Lock()
	w.wds[int32(wd)] = t
	w.byPath[path] = int32(wd)
	w.mu.Unlock()
	return nil
}

// addVM watches one VM's state or run dir; a dir already gone is no error
// (its parent's event said so).
func (w *watcher) addVM(kind watchKind, uid string) {
	dir := w.iv.l.VMStateDir(uid)
	if kind == watchRunVM {
		dir = w.iv.l.VMRunDir(uid)
	}
	w.mu.Lock()
	_, have := w.byPath[dir]
	w.mu.Unlock()
	if have {
		return
	}
	if err := w.add(dir, vmMask, watchTarget{kind: kind, uid: uid}); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
		w.iv.log.Warn("inventory: watch", "err", err)
	}
}

// scan watches the VM dirs that exist and follows the running VMs'
// events: what was there before Run.
func (w *watcher) scan(ctx context.Context) {
	for _, kind := range []watchKind{watchStateVM, watchRunVM} {
		dir := filepath.Join(w.iv.l.StateDir(), "vms")
		if kind == watchRunVM {
			dir = filepath.Join(w.iv.l.RunDir(), "vms")
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				w.addVM(kind, e.Name())
				if kind == watchRunVM {
					w.iv.mark(e.Name()) // flush follows it if it runs
				}
			}
		}
	}
}

// read handles inotify events until ctx ends.
func (w *watcher) read(ctx context.Context) {
	defer close(w.readDone)
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, os.ErrClosed) {
				w.iv.log.Warn("inventory: inotify read; VM changes are reported by the reconciliation only", "err", err)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := string(trimNUL(nameBytes))
			w.handle(ctx, ev.Wd, ev.Mask, name)
		}
	}
}

// looksLikeUID reports whether a dir name is a VM's UID (vm names them so).
func looksLikeUID(name string) bool {
	_, err := uuid.Parse(name)
	return err == nil && len(name) == 36
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func (w *watcher) handle(ctx context.Context, wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		select {
		case w.overflow <- struct{}{}:
		default:
		}
		return
	}
	w.mu.Lock()
	t, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.wds, wd)
		for p, d := range w.byPath {
			if d == wd {
				delete(w.byPath, p)
			}
		}
	}
	w.mu.Unlock()
	if !ok {
		return
	}
	switch t.kind {
	case watchStateVMs, watchRunVMs:
		if !looksLikeUID(name) {
			return
		}
		if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			kind := watchStateVM
			if t.kind == watchRunVMs {
				kind = watchRunVM
			}
			w.addVM(kind, name)
			if kind == watchRunVM {
				// the socket may be there before the watch was
				w.dialIfThere(ctx, name)
			}
		}
		w.iv.mark(name)
	case watchStateVM:
		w.iv.mark(t.uid)
	case watchRunVM:
		if name == eventsSocketName && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			w.dialIfThere(ctx, t.uid)
		}
		w.iv.mark(t.uid)
	}
}

// follow makes sure a running MANAGED VM has its events reader (Peek said
// it runs).
func (w *watcher) follow(ctx context.Context, uid string, e *vm.Entry) {
	if e.Class == vm.ClassManaged && e.PID > 0 {
		w.dialIfThere(ctx, uid)
	}
}

// dialIfThere starts the events reader of uid unless it has one or its
// socket is absent.
func (w *watcher) dialIfThere(ctx context.Context, uid string) {
	sock := filepath.Join(w.iv.l.VMRunDir(uid), eventsSocketName)
	if _, err := os.Stat(sock); err != nil {
		return
	}
	w.mu.Lock()
	if _, have := w.events[uid]; have || ctx.Err() != nil {
		w.mu.Unlock()
		return
	}
	ectx, cancel := context.WithCancel(ctx)
	w.events[uid] = cancel
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			delete(w.events, uid)
			w.mu.Unlock()
			cancel()
		}()
		w.readEvents(ectx, uid, sock)
	}()
}

// readEvents follows one VM's QMP events until the stream ends (QEMU is
// gone) or ctx ends. QEMU accepts the socket a moment after creating it
// and greets once its main loop runs: a dial refused or unanswered is
// tried again for eventsDialFor, while the socket is there.
func (w *watcher) readEvents(ctx context.Context, uid, sock string) {
	iv := w.iv
	// What happened before the connection is asked once connected, when
	// every later event is buffered: applied after this answer, they
	// leave the phase as QEMU has it.
	connected := func() {
		iv.log.Debug("inventory: following qmp events", "vm", uid)
		if _, e, err := iv.vms.Get(ctx, uid); err == nil && e != nil && e.Class == vm.ClassManaged && e.PID > 0 && e.Message == "" {
			iv.setPhase(uid, e.Phase)
			iv.mark(uid)
		}
	}
	err := vm.FollowEvents(ctx, sock, uid, "", vm.FollowOptions{Logger: iv.log, DialFor: eventsDialFor, DialTimeout: eventsDialTimeout, Connected: connected},
		func(ev vm.Event) {
			phase, ok := eventPhase(ev.Event)
			if !ok {
				return // POWERDOWN, RESET, ...: no phase of their own
			}
			iv.setPhase(uid, phase)
			iv.mark(uid)
		})
	if err != nil {
		if ctx.Err() == nil {
			iv.log.Debug("inventory: qmp events", "vm", uid, "err", err)
		}
		return
	}
	// the stream ended: QEMU is gone (or ctx ended)
	iv.setPhase(uid, "")
	if ctx.Err() == nil {
		iv.mark(uid)
		// its /proc entry can outlive the socket for a moment
		t := time.AfterFunc(time.Second, func() { iv.mark(uid) })
		context.AfterFunc(ctx, func() { t.Stop() })
	}
}

// eventPhase is the live phase a QMP event gives, if any.
func eventPhase(event string) (string, bool) {
	switch event {
	case "STOP", "SUSPEND":
		return vm.PhasePaused, true
	case "RESUME", "WAKEUP":
		return vm.PhaseRunning, true
	case "SHUTDOWN":
		return vm.PhaseShuttingDown, true
	case "GUEST_PANICKED":
		return vm.PhaseError, true
	}
	return "", false
}

// close stops every events reader and the inotify instance, once ctx
// has ended (read returns then, and starts no reader after).
func (w *watcher) close() {
	<-w.readDone
	w.mu.Lock()
	for _, cancel := range w.events {
		cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
	w.f.Close()
}
