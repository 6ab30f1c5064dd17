package vm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// Some QMP commands are answered only when their work is done, and QEMU
// answers nothing else meanwhile: QEMU 7.2 runs snapshot-save and
// snapshot-load in its main loop (the reply, and the reply to every
// command sent after, come when the RAM is written or read: 13 s for
// 750 MiB of dirty RAM here), an outgoing migration of a paused guest
// holds the main loop for its whole completion (query-migrate waits), an
// incoming one from a file loads in the main loop, and a transaction or
// block_resize drains the disk first. Bounding those by one exchange's
// bound (qmpBound, 3 s) gives up on QEMU half way and closes the monitor,
// which leaves the work done but not recorded. They are bounded by their
// operation's deadline instead (opDeadline), through execLong, which also
// says what QEMU is doing while the caller waits.
//
// The commands, and who bounds them so:
//   - snapshot-save, snapshot-load and the query-jobs polls after them
//     (runJob), blockdev-snapshot-internal-sync transactions,
//     blockdev-snapshot-delete-internal-sync (snapshot.go)
//   - migrate and query-migrate of vm save, migrate-incoming and
//     query-migrate of a resume (save.go, resume.go)
//   - the blockdev-backup transaction of a full clone (clone.go)
//   - block_resize (hotplug.go)
//
// device_del is answered at once (the guest's acknowledgement is the
// DEVICE_DELETED event, waited for with its own timeout); quit is
// answered at once and QEMU then drains its disks and ends (quitQEMU
// waits for the process). human-monitor-command is used only for
// drive_del of a detached disk's drive, which has no I/O left, and no
// savevm/loadvm is sent (snapshot-save/-load do that work).

// longQMPTimeout bounds a long command whose caller set no deadline: a
// safety net, every operation sets its own (opDeadline).
const longQMPTimeout = 10 * time.Minute

// busyQMPBound bounds one exchange with a QEMU busy with a job of ours
// (a backup copying disks, a snapshot just saved): it answers at once
// when idle but late under load, and a missed bound closes the monitor
// mid-operation, so such exchanges get ten of the usual bound.
func (m *Manager) busyQMPBound() time.Duration { return 10 * m.qmpBound() }

// opDeadline gives ctx the operation's deadline: its own when it has
// one, else def.
func opDeadline(ctx context.Context, def time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, def)
}

// OpProgress is how far a long QEMU operation has come (a memory snapshot,
// its restore, a save, a resume), reported while QEMU works.
type OpProgress struct {
	VM string
	// Op says what QEMU does: "saving memory", "loading memory", "saving
	// state", "loading saved state".
	Op      string
	Elapsed time.Duration
	// Bytes done so far of Total; -1 when it cannot be told (then only
	// the time is known).
	Bytes, Total int64
	// AtMost: Total is an upper bound (the guest's RAM: QEMU skips pages
	// that are zero), not the size the operation will reach.
	AtMost bool
	// Done is the last report of the operation, when it has ended (well
	// or not).
	Done bool
}

// OpProgressFunc receives an operation's progress, about once a second
// and once when it ends; nil receives nothing. It is called from the
// operation's goroutine and must not block.
type OpProgressFunc func(OpProgress)

// longOp is one long operation on a QEMU: what it reports, since when,
// and how far QEMU has come (measure returns -1 for bytes it cannot tell).
type longOp struct {
	vm, what string
	start    time.Time
	last     time.Time // of the last report
	report   OpProgressFunc
	measure  func() (bytes, total int64, atMost bool)
}

func newLongOp(vm, what string, report OpProgressFunc, measure func() (int64, int64, bool)) *longOp {
	return &longOp{vm: vm, what: what, start: time.Now(), report: report, measure: measure}
}

// tell reports the operation's progress now (nothing without a report
// function).
func (o *longOp) tell(done bool) {
	if o == nil || o.report == nil {
		return
	}
	o.last = time.Now()
	p := OpProgress{VM: o.vm, Op: o.what, Elapsed: time.Since(o.start), Bytes: -1, Total: -1, Done: done}
	if o.measure != nil {
		p.Bytes, p.Total, p.AtMost = o.measure()
	}
	o.report(p)
}

// tick reports the progress when the last report is older than every.
func (o *longOp) tick(every time.Duration) {
	if o != nil && time.Since(o.last) >= every {
		o.tell(false)
	}
}

// progressTick is how often a long operation reports: each second, or
// more often under a short exchange bound (tests).
func (m *Manager) progressTick() time.Duration {
	return min(time.Second, m.qmpBound()/2)
}

// execLong runs a QMP command that QEMU may answer only when its work is
// done: bounded by ctx's deadline (the operation's; longQMPTimeout
// without one), never by the exchange bound, and reporting op's progress
// while it waits. A slow answer is progress, not a failure; a missed
// deadline closes the monitor as any (qmp.Monitor.Execute), and QEMU may
// still be at work: the caller's undo dials anew (freshMonitor).
func (m *Manager) execLong(ctx context.Context, mon *qmp.Monitor, op *longOp, command string, args, result any) error {
	ctx, cancel := opDeadline(ctx, longQMPTimeout)
	defer cancel()
	if op == nil || op.report == nil {
		return mon.Execute(ctx, command, args, result)
	}
	done := make(chan error, 1)
	go func() { done <- mon.Execute(ctx, command, args, result) }()
	t := time.NewTicker(m.progressTick())
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			op.tell(false)
		}
	}
}

// freshMonitor returns mon while it is open, else a new session on the
// VM's QMP socket (QEMU serves one client at a time: the closed one is
// let go first), dialled within ctx: a QEMU still at the work a missed
// deadline gave up on greets the new client only when it is done.
func (m *Manager) freshMonitor(ctx context.Context, uid string, mon *qmp.Monitor) (*qmp.Monitor, error) {
	if mon != nil && !mon.Closed() {
		return mon, nil
	}
	if mon != nil {
		mon.Close()
	}
	return m.dialQMP(ctx, uid)
}

// allocatedBytes is the space a file takes on disk (what QEMU has
// written into a qcow2: its vmstate grows it); -1 when it cannot be read.
func allocatedBytes(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return -1
	}
	return st.Blocks * 512
}

// readBytes is what the process has read so far (rchar of /proc/PID/io:
// what a snapshot-load reads of the vmstate counts there); -1 when it
// cannot be read.
func (p procFS) readBytes(pid int) int64 {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "io"))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// quitQEMU sends quit to the VM's QEMU (pid) and waits for the process to
// end; it reports whether it did (else the caller kills it). A QEMU that
// acknowledged quit drains and flushes its disks before it ends (seconds
// when the guest was writing, which a SIGKILL would cut short): it gets
// ten exchange bounds (30 s); one that did not answer, one.
func (m *Manager) quitQEMU(ctx context.Context, name, uid string, pid int) (gone bool) {
	wait := 10 * m.qmpBound()
	if err := m.qmpDo(ctx, uid, func(ctx context.Context, mon *qmp.Monitor) error { return mon.Quit(ctx) }); err != nil {
		m.log.Warn("QMP quit failed; killing", "vm", name, "err", err)
		wait = m.qmpBound()
	}
	return m.waitGone(ctx, pid, uid, wait)
}
