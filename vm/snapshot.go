package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/revert"
	"github.com/virtcon/virtcon/qmp"
)

// Snapshots are qcow2 internal snapshots, one tag on every disk of the
// VM: the qcow2 files are the truth (what List reads), and a small record
// in the VM's state directory (snapshots.json) says what the files cannot:
// which disks a snapshot was taken of (a disk added since has no tag, one
// removed since is gone), its devices and machine (a memory snapshot),
// and that virt finished making it: a tag without a record is listed as
// unrecorded and never restored.
//
// While the VM runs they are made through QMP: disk-only in one
// transaction of blockdev-snapshot-internal-sync with the guest paused
// for the moment it takes, so every disk is cut at the same instant; with
// memory by QEMU's snapshot-save job (RAM and device state into the first
// disk). While it is stopped, with qemu-img snapshot under the VM's lock.

// SnapshotOptions tune CreateSnapshot.
type SnapshotOptions struct {
	// Memory also saves RAM and device state (the VM must run): a restore
	// resumes the guest where it was.
	Memory bool
	// Progress receives what QEMU does while it saves the memory (seconds
	// per GiB); nil receives nothing.
	Progress OpProgressFunc
}

// Snapshot is one snapshot of a VM.
type Snapshot struct {
	Name      string    `json:"name" yaml:"name"`
	CreatedAt time.Time `json:"createdAt" yaml:"createdAt"`
	// VMStateBytes is the RAM and device state the snapshot holds (0 for
	// a disk-only one): its own, as the qcow2 snapshot table records it.
	// Its disk data has no size of its own: a qcow2 internal snapshot
	// shares clusters with the live disk and the other snapshots until
	// one of them is written, so what deleting it frees depends on what
	// was written since, which no table records.
	VMStateBytes int64 `json:"vmStateBytes" yaml:"vmStateBytes"`
	// SizeBytes is VMStateBytes, kept for readers of the old field (it
	// used to add the disks' allocation when taken, which counted the
	// memory state of the snapshots before it).
	SizeBytes int64 `json:"sizeBytes" yaml:"sizeBytes"`
	Memory    bool  `json:"memory" yaml:"memory"`
	// Disks are the disks (spec.disks[].name) the snapshot was taken of
	// (recorded), or that hold it (unrecorded, partial).
	Disks []string `json:"disks" yaml:"disks"`
	// State is whether the snapshot can be trusted for a restore:
	// recorded in snapshots.json and on the disks it was taken of, or not
	// (unrecorded, partial), and then Why says what is known of it.
	State SnapshotState `json:"state" yaml:"state"`
	Why   string        `json:"why,omitempty" yaml:"why,omitempty"`
}

// RestoreOptions tune RestoreSnapshot.
type RestoreOptions struct {
	// Force restores a running VM: a disk-only snapshot powers it off
	// (no shutdown: its disks go back in time), restores and starts it
	// again; a memory snapshot is loaded into it in place.
	Force bool
	// Progress receives what QEMU does while it loads a memory snapshot;
	// nil receives nothing.
	Progress OpProgressFunc
}

// DeleteOptions tune DeleteWith.
type DeleteOptions struct {
	// Force kills a running VM first.
	Force bool
	// WithSnapshots deletes a VM that has snapshots (they live in its
	// disks and go with them).
	WithSnapshots bool
}

const (
	snapshotsFile   = "snapshots.json"
	snapshotsFormat = 1
	// snapshotJobTimeout bounds a snapshot-save/load job when ctx has no
	// deadline (RAM is written to the disk: seconds per GiB).
	snapshotJobTimeout = 10 * time.Minute
)

var snapshotNameRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ValidateSnapshotName checks a snapshot name: 1-63 letters, digits, '.',
// '_' or '-', starting with a letter (qcow2 also finds snapshots by their
// numeric id: a name never looks like one) and ending with a letter or
// digit.
func ValidateSnapshotName(name string) *FieldError {
	if !snapshotNameRE.MatchString(name) {
		return fieldErr("snapshot", shownValue(name), "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter and ending with a letter or digit")
	}
	return nil
}

// snapshotRecord is what snapshots.json keeps of one snapshot.
type snapshotRecord struct {
	CreatedAt time.Time `json:"createdAt"`
	Memory    bool      `json:"memory"`
	Disks     []string  `json:"disks"`
	// DiskBytes was the disks' allocation when taken (records before
	// VMStateBytes): read, not shown; it counted other snapshots' memory
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// a memory snapshot's device state is that of the QEMU it was taken
	// in: QEMUPID and Hotplugged are that QEMU's and its hot-plug
	// changes, when it had any (none: the devices of its command line)
	QEMUPID    int      `json:"qemuPid,omitempty"`
	Hotplugged []string `json:"hotplugged,omitempty"`
	// Shape is a memory snapshot's machine as its QEMU's command line had
	// it (CPUs, memory, firmware, disks, NICs): a restore into a QEMU of
	// another shape (a NIC or memory changed in the spec while stopped)
	// is refused, as a resume of a saved state is
	Shape *SavedShape `json:"shape,omitempty"`
}

type snapshotMeta struct {
	Format    int                       `json:"format"`
	Snapshots map[string]snapshotRecord `json:"snapshots"`
}

func (m *Manager) snapshotsPath(uid string) string {
	return filepath.Join(m.layout().VMStateDir(uid), snapshotsFile)
}

// readSnapshotMeta reads snapshots.json; none is an empty record. One
// that cannot be read is an error: a restore must not guess the layout.
func (m *Manager) readSnapshotMeta(uid string) (snapshotMeta, error) {
	meta := snapshotMeta{Format: snapshotsFormat, Snapshots: map[string]snapshotRecord{}}
	b, err := os.ReadFile(m.snapshotsPath(uid))
	if errors.Is(err, os.ErrNotExist) {
		return meta, nil
	}
	if err != nil {
		return meta, fmt.Errorf("snapshot record: %w", err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return meta, fmt.Errorf("snapshot record %s: %w", m.snapshotsPath(uid), err)
	}
	if meta.Format != snapshotsFormat {
		return meta, fmt.Errorf("snapshot record %s: format %d, want %d", m.snapshotsPath(uid), meta.Format, snapshotsFormat)
	}
	if meta.Snapshots == nil {
		meta.Snapshots = map[string]snapshotRecord{}
	}
	return meta, nil
}

func (m *Manager) writeSnapshotMeta(uid string, meta snapshotMeta) error {
	meta.Format = snapshotsFormat
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(m.snapshotsPath(uid), append(b, '\n'), 0o600)
}

// qcowSnapshot is one entry of a qcow2 snapshot table, as qemu-img info
// and QMP query-block report it.
type qcowSnapshot struct {
	Name        string `json:"name"`
	VMStateSize int64  `json:"vm-state-size"`
	DateSec     int64  `json:"date-sec"`
	DateNsec    int64  `json:"date-nsec"`
}

// qmpBlock is the part of a query-block entry snapshots need.
type qmpBlock struct {
	Device   string `json:"device"`
	Qdev     string `json:"qdev"`
	Inserted *struct {
		NodeName string `json:"node-name"`
		Image    struct {
			Snapshots []qcowSnapshot `json:"snapshots"`
		} `json:"image"`
	} `json:"inserted"`
}

// qmpJob is the part of a query-jobs entry runJob needs.
type qmpJob struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// diskState is one disk of the VM as read now.
type diskState struct {
	disk  string // spec.disks[].name
	path  string
	node  string // running: the QEMU node of its image
	dev   string // running: its id for QMP's device arguments (qmpDiskID)
	snaps []qcowSnapshot
}

func (d diskState) has(tag string) (qcowSnapshot, bool) {
	for _, s := range d.snaps {
		if s.Name == tag {
			return s, true
		}
	}
	return qcowSnapshot{}, false
}

// readDisks reads every disk's snapshot table: from the running QEMU
// (mon) or from the files. Any disk that cannot be read is an error.
func (m *Manager) readDisks(ctx context.Context, vm *VirtualMachine, mon *qmp.Monitor) ([]diskState, error) {
	uid := vm.Metadata.UID
	out := make([]diskState, 0, len(vm.Spec.Disks))
	if mon != nil {
		var blocks []qmpBlock
		c, cancel := context.WithTimeout(ctx, m.qmpBound())
		err := mon.Execute(c, "query-block", nil, &blocks)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("QMP query-block: %w", err)
		}
		for _, d := range vm.Spec.Disks {
			i := slices.IndexFunc(blocks, func(b qmpBlock) bool {
				return b.Inserted != nil && isDiskBlock(d.Name, b.Device, b.Qdev, b.Inserted.NodeName)
			})
			if i < 0 {
				return nil, fmt.Errorf("disk %q: not attached to the running QEMU (no block device %s)", d.Name, DiskDriveID(d.Name))
			}
			in := blocks[i].Inserted
			out = append(out, diskState{disk: d.Name, path: m.diskPath(uid, d.Name), node: in.NodeName, dev: qmpDiskID(blocks[i].Device, in.NodeName), snaps: in.Image.Snapshots})
		}
		return out, nil
	}
	// stopped: the tables straight from the files (qcow2snap.go), no
	// qemu-img process per disk; the VM's lock keeps writers away
	for _, d := range vm.Spec.Disks {
		p := m.diskPath(uid, d.Name)
		snaps, err := readQcow2Snapshots(p)
		if err != nil {
			return nil, fmt.Errorf("disk %q: %w", d.Name, err)
		}
		out = append(out, diskState{disk: d.Name, path: p, snaps: snaps})
	}
	return out, nil
}

// diskSnapshotTags reads the internal snapshots' names of one disk file
// (a shared read: a running QEMU may hold it). A file that is gone has
// none.
func (m *Manager) diskSnapshotTags(ctx context.Context, path string) ([]string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	img, err := m.qemuImg()
	if err != nil {
		return nil, err
	}
	b, err := qemuImgOut(ctx, img, "info", "--output=json", "-U", path)
	if err != nil {
		return nil, err
	}
	var info struct {
		Snapshots []qcowSnapshot `json:"snapshots"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	tags := make([]string, 0, len(info.Snapshots))
	for _, sn := range info.Snapshots {
		tags = append(tags, sn.Name)
	}
	return tags, nil
}

func qemuImgOut(ctx context.Context, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := childCommand(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := runChild(cmd); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// snapshotSession is what one snapshot operation reads under the lock.
type snapshotSession struct {
	vm    *VirtualMachine
	pid   int
	mon   *qmp.Monitor // nil when the VM is stopped
	disks []diskState
	meta  snapshotMeta
	snaps []Snapshot
}

func (s *snapshotSession) close() {
	if s.mon != nil {
		s.mon.Close()
	}
}

// nameTaken is the name of the snapshot that name would clash with:
// names are unique regardless of case.
func (s *snapshotSession) nameTaken(name string) (string, bool) {
	for _, sn := range s.snaps {
		if strings.EqualFold(sn.Name, name) {
			return sn.Name, true
		}
	}
	return "", false
}

// openSnapshots reads the VM's snapshots under its lock (held by the
// caller): from QMP while it runs, from the files while it is stopped.
func (m *Manager) openSnapshots(ctx context.Context, vm *VirtualMachine) (*snapshotSession, error) {
	s := &snapshotSession{vm: vm, pid: m.livePID(vm.Metadata.UID)}
	if s.pid > 0 {
		dctx, cancel := context.WithTimeout(ctx, m.qmpBound())
		mon, err := m.dialQMP(dctx, vm.Metadata.UID)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("QMP: %w", err)
		}
		s.mon = mon
	}
	var err error
	if s.meta, err = m.readSnapshotMeta(vm.Metadata.UID); err != nil {
		s.close()
		return nil, err
	}
	if s.disks, err = m.readDisks(ctx, vm, s.mon); err != nil {
		s.close()
		return nil, err
	}
	s.snaps = assembleSnapshots(s.disks, s.meta)
	return s, nil
}

// ListSnapshots lists the VM's snapshots, oldest first, read from its
// disks (a disk that cannot be read is an error, not an empty list).
func (m *Manager) ListSnapshots(ctx context.Context, ref string) ([]Snapshot, error) {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer l.Release()
	s, err := m.openSnapshots(ctx, vm)
	if err != nil {
		return nil, fmt.Errorf("vm %q: snapshots: %w", vm.Metadata.Name, err)
	}
	defer s.close()
	return s.snaps, nil
}

// CreateSnapshot takes a snapshot of every disk of the VM, all at the
// same instant; with o.Memory also of its RAM and device state (the VM
// must run). A failure on any disk removes what was made on the others,
// and a paused guest runs again as it did.
func (m *Manager) CreateSnapshot(ctx context.Context, ref, name string, o SnapshotOptions) (*Snapshot, error) {
	if fe := ValidateSnapshotName(name); fe != nil {
		return nil, invalidSnapshotName(fe)
	}
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer l.Release()
	vmName, uid := vm.Metadata.Name, vm.Metadata.UID
	fail := func(err error) error { return fmt.Errorf("vm %q: snapshot %q: %w", vmName, name, err) }
	if len(vm.Spec.Disks) == 0 {
		return nil, fail(errors.New("the VM has no disks"))
	}
	s, err := m.openSnapshots(ctx, vm)
	if err != nil {
		return nil, fail(err)
	}
	defer s.close()
	if taken, ok := s.nameTaken(name); ok {
		return nil, &SnapshotExistsError{VM: vmName, Name: name, Existing: taken}
	}
	if o.Memory && s.mon == nil {
		return nil, fail(fmt.Errorf("a memory snapshot needs the VM running: %w", ErrNotRunning))
	}
	var hotplugChanges []string
	if o.Memory {
		// the device state saved is of the devices QEMU has now: a restore
		// must find the same ones (RestoreSnapshot)
		if hotplugChanges, err = m.hotplugChanges(uid, s.pid); err != nil {
			return nil, fail(err)
		}
	}
	if s.mon != nil && m.anySaved(uid) {
		// as qmpOp: the guest runs on after this, a saved state is spent
		if err := m.spendSaved(uid); err != nil {
			return nil, fail(fmt.Errorf("remove the stale saved state first: %w", err))
		}
	}
	r := revert.New()
	defer r.Fail()
	start := time.Now()
	switch {
	case o.Memory:
		err = m.snapshotMemory(ctx, s, name, r, o.Progress)
	case s.mon != nil:
		err = m.snapshotLive(ctx, s, name, r)
	default:
		err = m.snapshotFiles(ctx, s, name, r)
	}
	if err != nil {
		return nil, fail(err)
	}
	took := time.Since(start)
	names := make([]string, 0, len(s.disks))
	for _, d := range s.disks {
		names = append(names, d.disk)
	}
	// read back what the disks now say: the truth List will show
	disks, err := m.readDisks(ctx, vm, s.mon)
	if err != nil {
		return nil, fail(err)
	}
	rec := snapshotRecord{CreatedAt: time.Now().UTC(), Memory: o.Memory, Disks: names}
	if o.Memory {
		rec.QEMUPID, rec.Hotplugged = s.pid, hotplugChanges
		if argv := m.argv(s.pid); len(argv) > 0 {
			shape := shapeOf(argv)
			rec.Shape = &shape
		}
	}
	s.meta.Snapshots[name] = rec
	if err := m.writeSnapshotMeta(uid, s.meta); err != nil {
		return nil, fail(err)
	}
	r.Success()
	for _, sn := range assembleSnapshots(disks, s.meta) {
		if sn.Name == name {
			m.log.Info("snapshot created", "vm", vmName, "snapshot", name, "memory", o.Memory, "running", s.mon != nil, "took", took)
			return &sn, nil
		}
	}
	return nil, fail(errors.New("the snapshot is not on the disks after it was made"))
}

// snapshotLive snapshots the disks of a running QEMU in one transaction
// (all or none), the guest paused meanwhile.
func (m *Manager) snapshotLive(ctx context.Context, s *snapshotSession, name string, r *revert.Stack) error {
	mon := s.mon
	resume, err := pauseGuest(ctx, mon)
	if err != nil {
		return err
	}
	type action struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	actions := make([]action, 0, len(s.disks))
	for _, d := range s.disks {
		actions = append(actions, action{Type: "blockdev-snapshot-internal-sync", Data: map[string]any{"device": d.dev, "name": name}})
	}
	// the transaction drains the disks first: a guest's I/O in flight
	// makes it late, so the operation's deadline bounds it
	tctx, cancel := opDeadline(ctx, snapshotJobTimeout)
	err = m.execLong(tctx, mon, nil, "transaction", map[string]any{"actions": actions}, nil)
	cancel()
	if rerr := m.resumeAfter(ctx, s, resume); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, qmp.ErrClosed) {
			// the transaction may have been done without an answer
			if uerr := m.undoTagLive(ctx, s, name); uerr != nil {
				err = fmt.Errorf("%w; and the snapshot QEMU may have made could not be removed (%v): it may be on the disks without a record", err, uerr)
			}
		}
		return fmt.Errorf("QMP transaction blockdev-snapshot-internal-sync: %w", err)
	}
	r.Add(func() error { return m.undoTagLive(ctx, s, name) })
	return nil
}

// resumeAfter runs a pauseGuest resume; when a missed deadline closed
// the session's monitor, it continues the guest on a new one (once QEMU
// answers again), which becomes the session's.
func (m *Manager) resumeAfter(ctx context.Context, s *snapshotSession, resume func() error) error {
	err := resume()
	if err == nil || !errors.Is(err, qmp.ErrClosed) {
		return err
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotUndoTimeout)
	defer cancel()
	mon, derr := m.freshMonitor(c, s.vm.Metadata.UID, s.mon)
	if derr != nil {
		return fmt.Errorf("%w; and on a new QMP session: %w", err, derr)
	}
	s.mon = mon
	if err := mon.Cont(c); err != nil {
		return fmt.Errorf("resume the guest: %w", err)
	}
	return nil
}

// pauseGuest stops a running guest's vCPUs; resume lets it run again
// (nothing when it was not running).
func pauseGuest(ctx context.Context, mon *qmp.Monitor) (resume func() error, err error) {
	c, cancel := context.WithTimeout(ctx, qmpTimeout)
	defer cancel()
	st, err := mon.Status(c)
	if err != nil {
		return nil, fmt.Errorf("QMP query-status: %w", err)
	}
	if st.Status != "running" {
		return func() error { return nil }, nil
	}
	if err := mon.Stop(c); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	return func() error {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), qmpTimeout)
		defer cancel()
		if err := mon.Cont(c); err != nil {
			return fmt.Errorf("resume the guest: %w", err)
		}
		return nil
	}, nil
}

// deleteTagLive removes tag from every disk of the running QEMU that has
// it, each removal bounded by ctx (it frees the snapshot's clusters: a
// memory snapshot's take a while). A disk without the tag is no error.
func (m *Manager) deleteTagLive(ctx context.Context, s *snapshotSession, tag string) error {
	var errs []error
	for _, d := range s.disks {
		err := m.execLong(ctx, s.mon, nil, "blockdev-snapshot-delete-internal-sync", map[string]any{"device": d.dev, "name": tag}, nil)
		var ce *qmp.CommandError
		if err != nil && !errors.As(err, &ce) {
			m.log.Warn("snapshot not removed from a disk", "vm", s.vm.Metadata.Name, "disk", d.disk, "snapshot", tag, "err", err)
			errs = append(errs, fmt.Errorf("disk %q: %w", d.disk, err))
		}
	}
	return errors.Join(errs...)
}

// snapshotFiles snapshots the disks of a stopped VM with qemu-img; a
// failure removes the tags already made.
func (m *Manager) snapshotFiles(ctx context.Context, s *snapshotSession, name string, r *revert.Stack) error {
	img, err := m.qemuImg()
	if err != nil {
		return err
	}
	for _, d := range s.disks {
		if _, err := qemuImgOut(ctx, img, "snapshot", "-c", name, d.path); err != nil {
			return fmt.Errorf("disk %q: %w", d.disk, err)
		}
		p := d.path
		r.Add(func() error {
			_, err := qemuImgOut(context.WithoutCancel(ctx), img, "snapshot", "-d", name, p)
			return err
		})
	}
	return nil
}

// snapshotMemory runs QEMU's snapshot-save job: RAM and device state into
// the first disk, a tag on every disk. QEMU stops the guest for it and
// lets it run again after.
//
// A job that failed, or whose answer did not come within the operation's
// deadline (QEMU may still be writing), is undone: the tag goes from
// every disk, through a new monitor when the missed deadline closed this
// one, once QEMU answers again. A tag that stays is said in the error: it
// is on the disks but not in the record.
func (m *Manager) snapshotMemory(ctx context.Context, s *snapshotSession, name string, r *revert.Stack, progress OpProgressFunc) error {
	nodes := make([]string, 0, len(s.disks))
	for _, d := range s.disks {
		nodes = append(nodes, d.node)
	}
	// what QEMU has written of the vmstate grows the first disk's file
	vmstate, before := s.disks[0].path, allocatedBytes(s.disks[0].path)
	ram := int64(s.vm.Spec.MemoryMiB) << 20
	if n := argMemoryMiB(m.argv(s.pid)); n > 0 {
		ram = int64(n) << 20
	}
	op := newLongOp(s.vm.Metadata.Name, "saving memory", progress, func() (int64, int64, bool) {
		now := allocatedBytes(vmstate)
		if before < 0 || now < 0 {
			return -1, ram, true
		}
		return max(0, now-before), ram, true
	})
	err := m.runJob(ctx, s.mon, op, "snapshot-save", map[string]any{"tag": name, "vmstate": nodes[0], "devices": nodes})
	op.tell(true)
	if err != nil {
		if uerr := m.undoTagLive(ctx, s, name); uerr != nil {
			return fmt.Errorf("%w; and the snapshot QEMU may have made could not be removed (%v): it may be on the disks without a record: virt vm snapshot delete %s %s", err, uerr, s.vm.Metadata.Name, name)
		}
		return err
	}
	r.Add(func() error { return m.undoTagLive(ctx, s, name) })
	return nil
}

// snapshotUndoTimeout bounds the removal of a snapshot a failed create
// left (on its own deadline: the caller's may be what ended it), which
// waits for QEMU to finish what it still does.
const snapshotUndoTimeout = 2 * time.Minute

// undoTagLive removes tag from every disk of the running QEMU that has
// it, on a monitor of its own if s.mon was closed by a missed deadline.
func (m *Manager) undoTagLive(ctx context.Context, s *snapshotSession, tag string) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotUndoTimeout)
	defer cancel()
	mon, err := m.freshMonitor(c, s.vm.Metadata.UID, s.mon)
	if err != nil {
		return fmt.Errorf("QMP: %w", err)
	}
	s.mon = mon
	if err := m.deleteTagLive(c, s, tag); err != nil {
		return err
	}
	return nil
}

// runJob runs a QMP job (snapshot-save/-load) to its end and returns its
// error. QEMU 7.2 answers the command only when the job is done, and
// nothing else meanwhile (query-jobs included), so the command and the
// polls of query-jobs after it are bounded by the operation's deadline
// (snapshotJobTimeout without one), not by one exchange's; op reports
// while it runs. A snapshot job cannot be cancelled: when the deadline
// ends it, QEMU finishes it, and the caller undoes what it made.
func (m *Manager) runJob(ctx context.Context, mon *qmp.Monitor, op *longOp, command string, args map[string]any) error {
	ctx, cancel := opDeadline(ctx, snapshotJobTimeout)
	defer cancel()
	id := fmt.Sprintf("virtcon-%s-%d", command, time.Now().UnixNano())
	args["job-id"] = id
	if err := m.execLong(ctx, mon, op, command, args, nil); err != nil {
		return fmt.Errorf("QMP %s: %w", command, err)
	}
	dismiss := func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.busyQMPBound())
		defer cancel()
		if err := mon.Execute(c, "job-dismiss", map[string]any{"id": id}, nil); err != nil {
			m.log.Debug("job not dismissed", "job", id, "err", err)
		}
	}
	delay := 5 * time.Millisecond
	for {
		var jobs []qmpJob
		if err := m.execLong(ctx, mon, op, "query-jobs", nil, &jobs); err != nil {
			return fmt.Errorf("QMP query-jobs (%s): %w", command, err)
		}
		i := slices.IndexFunc(jobs, func(j qmpJob) bool {
			return j.ID == id
		})
		if i < 0 {
			return fmt.Errorf("QMP %s: job %s vanished", command, id)
		}
		switch jobs[i].Status {
		case "concluded", "null":
			dismiss()
			if jobs[i].Error != "" {
				return fmt.Errorf("QMP %s: %s", command, jobs[i].Error)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("QMP %s: waiting for job %s: %w", command, id, ctx.Err())
		case <-time.After(delay):
		}
		op.tick(m.progressTick())
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// checkLayout refuses a snapshot not taken of exactly the VM's disks now,
// or one some disk does not hold.
func checkLayout(s *snapshotSession, snap Snapshot) error {
	now := make([]string, 0, len(s.disks))
	var missing []string
	for _, d := range s.disks {
		now = append(now, d.disk)
		if _, ok := d.has(snap.Name); !ok {
			missing = append(missing, d.disk)
		}
	}
	then := slices.Clone(snap.Disks)
	a, b := slices.Clone(then), slices.Clone(now)
	slices.Sort(a)
	slices.Sort(b)
	if len(missing) > 0 || !slices.Equal(a, b) {
		return &SnapshotLayoutError{VM: s.vm.Metadata.Name, Name: snap.Name, Then: then, Now: now, Missing: missing}
	}
	return nil
}

// vmstateSize is the size of a memory snapshot's RAM and device state.
func vmstateSize(s *snapshotSession, tag string) int64 {
	for _, d := range s.disks {
		if sn, ok := d.has(tag); ok && sn.VMStateSize > 0 {
			return sn.VMStateSize
		}
	}
	return -1
}

// vmstateNode is the node holding a memory snapshot's RAM.
func vmstateNode(s *snapshotSession, tag string) string {
	for _, d := range s.disks {
		if sn, ok := d.has(tag); ok && sn.VMStateSize > 0 {
			return d.node
		}
	}
	return ""
}

// RestoreSnapshot brings the VM's disks (and, for a memory snapshot, its
// RAM and devices) back to the snapshot. A running VM needs o.Force: a
// disk-only snapshot powers it off at once, restores the disks and
// starts it again; a memory snapshot is loaded into the running QEMU and
// the guest resumes where it was. A stopped VM restored to a memory
// snapshot is started, and resumes where the snapshot was taken.
func (m *Manager) RestoreSnapshot(ctx context.Context, ref, name string, o RestoreOptions) error {
	if fe := ValidateSnapshotName(name); fe != nil {
		return invalidSnapshotName(fe)
	}
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return err
	}
	defer l.Release()
	vmName, uid := vm.Metadata.Name, vm.Metadata.UID
	fail := func(err error) error { return fmt.Errorf("vm %q: restore snapshot %q: %w", vmName, name, err) }
	s, err := m.openSnapshots(ctx, vm)
	if err != nil {
		return fail(err)
	}
	defer func() { s.close() }()
	snap, err := lookupSnapshot(s.snaps, vmName, name)
	if err != nil {
		return err
	}
	name = snap.Name // as the disks spell it
	if err := checkRecorded(vmName, snap); err != nil {
		return err
	}
	if err := checkLayout(s, snap); err != nil {
		return err
	}
	if snap.Memory {
		if err := m.checkSnapshotDevices(s, name); err != nil {
			return fail(err)
		}
		if err := m.checkSnapshotShape(s, name); err != nil {
			if se := (*SnapshotShapeError)(nil); errors.As(err, &se) {
				return err // names the VM and the snapshot itself
			}
			return fail(err)
		}
	}
	if s.pid > 0 && !o.Force {
		return &RestoreRunningError{VM: vmName, Name: name, PID: s.pid, Memory: snap.Memory}
	}
	if s.pid == 0 && m.hasSaved(uid) {
		return fail(errors.New("the VM has a saved state (virt vm save) that belongs to its disks as they are: start it, or throw the state away, first"))
	}
	start := time.Now()
	if snap.Memory {
		if s.mon == nil {
			// the guest resumes from the snapshot, not from a boot
			if err := m.startLocked(ctx, vm, StartOptions{}); err != nil {
				return fail(fmt.Errorf("start to load the memory snapshot: %w", err))
			}
			s.close()
			if s, err = m.openSnapshots(ctx, vm); err != nil {
				return fail(err)
			}
		}
		if m.anySaved(uid) {
			if err := m.spendSaved(uid); err != nil {
				return fail(fmt.Errorf("remove the stale saved state first: %w", err))
			}
		}
		nodes := make([]string, 0, len(s.disks))
		for _, d := range s.disks {
			nodes = append(nodes, d.node)
		}
		// what QEMU has read of the vmstate counts in its rchar
		pid, total := s.pid, vmstateSize(s, name)
		before := m.proc.readBytes(pid)
		op := newLongOp(vmName, "loading memory", o.Progress, func() (int64, int64, bool) {
			now := m.proc.readBytes(pid)
			if before < 0 || now < 0 {
				return -1, total, false
			}
			return min(total, now-before), total, false
		})
		err := m.runJob(ctx, s.mon, op, "snapshot-load", map[string]any{"tag": name, "vmstate": vmstateNode(s, name), "devices": nodes})
		op.tell(true)
		if err != nil {
			// snapshot-load reverts the disks, then loads the state: a
			// failed one leaves the guest stopped on disks that may be at
			// the snapshot's point with its memory half loaded, which a
			// resume would run on and corrupt. The caller gave up the
			// running state (force, or a VM started for the restore).
			pid := s.pid
			s.close()
			s.mon = nil
			if pid == 0 {
				pid = m.livePID(uid)
			}
			if pid > 0 {
				if perr := m.powerOffLocked(ctx, vm, pid); perr != nil {
					return fail(fmt.Errorf("%w; and the stopped guest, on disks that may be reverted, was not powered off: %v: do not resume it (virt vm stop --force)", err, perr))
				}
			}
			return fail(fmt.Errorf("%w; the guest was powered off, not resumed: its disks may be at the snapshot's point and its memory was half loaded (start it to boot from its disks, or restore again)", err))
		}
		c, cancel := context.WithTimeout(ctx, m.qmpBound())
		st, err := s.mon.Status(c)
		cancel()
		if err == nil {
			vm.Status.Phase = phaseFromQMP(st.Status)
			if err := m.store.save(vm); err != nil {
				return fail(err)
			}
		}
		m.log.Info("snapshot restored", "vm", vmName, "snapshot", name, "memory", true, "took", time.Since(start))
		return nil
	}
	wasRunning := s.pid > 0
	if wasRunning {
		// the disks go back in time under the guest: no shutdown to wait for
		s.close()
		s.mon = nil
		if err := m.powerOffLocked(ctx, vm, s.pid); err != nil {
			return fail(err)
		}
	}
	img, err := m.qemuImg()
	if err != nil {
		return fail(err)
	}
	for i, d := range s.disks {
		if _, err := qemuImgOut(ctx, img, "snapshot", "-a", name, d.path); err != nil {
			err = fmt.Errorf("disk %q: %w", d.disk, err)
			if i > 0 {
				err = fmt.Errorf("%w (disks before it were restored already)", err)
			}
			return fail(err)
		}
	}
	if wasRunning {
		if err := m.startLocked(ctx, vm, StartOptions{}); err != nil {
			return fail(fmt.Errorf("restored; start again: %w", err))
		}
	}
	m.log.Info("snapshot restored", "vm", vmName, "snapshot", name, "memory", false, "restarted", wasRunning, "took", time.Since(start))
	return nil
}

// powerOffLocked ends the VM's QEMU at once (quit, then SIGKILL) under
// the caller's lock; spec.running stays as it is.
func (m *Manager) powerOffLocked(ctx context.Context, vm *VirtualMachine, pid int) error {
	uid := vm.Metadata.UID
	tapNS := m.holdTAPNetns(vm, pid)
	if st, _ := m.proc.state(pid); st != "T" {
		if m.quitQEMU(ctx, vm.Metadata.Name, uid, pid) {
			pid = 0
		}
	}
	if pid > 0 {
		if err := m.killVerified(pid, uid); err != nil {
			if tapNS != nil {
				tapNS.Close()
			}
			return err
		}
	}
	m.cleanRuntime(uid)
	m.deleteTAPsIn(ctx, vm, tapNS)
	vm.Status.Phase, vm.Status.PID = PhaseStopped, 0
	return m.store.save(vm)
}

// DeleteSnapshot removes a snapshot from every disk that holds it (the
// kept files of disks detached since included), then from the record.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref, name string) error {
	if fe := ValidateSnapshotName(name); fe != nil {
		return invalidSnapshotName(fe)
	}
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return err
	}
	defer l.Release()
	vmName, uid := vm.Metadata.Name, vm.Metadata.UID
	fail := func(err error) error { return fmt.Errorf("vm %q: delete snapshot %q: %w", vmName, name, err) }
	s, err := m.openSnapshots(ctx, vm)
	if err != nil {
		return fail(err)
	}
	defer s.close()
	snap, err := lookupSnapshot(s.snaps, vmName, name)
	if err != nil {
		return err
	}
	name = snap.Name // as the disks spell it
	if err := m.deleteTagKept(ctx, vm, name); err != nil {
		return fail(err)
	}
	img := ""
	if s.mon == nil {
		if img, err = m.qemuImg(); err != nil {
			return fail(err)
		}
	}
	for _, d := range s.disks {
		if _, ok := d.has(name); !ok {
			continue
		}
		if s.mon != nil {
			// freeing a memory snapshot's clusters takes a while
			c, cancel := opDeadline(ctx, snapshotJobTimeout)
			err = m.execLong(c, s.mon, nil, "blockdev-snapshot-delete-internal-sync", map[string]any{"device": d.dev, "name": name}, nil)
			cancel()
		} else {
			_, err = qemuImgOut(ctx, img, "snapshot", "-d", name, d.path)
		}
		if err != nil {
			return fail(fmt.Errorf("disk %q: %w", d.disk, err))
		}
	}
	if _, ok := s.meta.Snapshots[name]; ok {
		delete(s.meta.Snapshots, name)
		if err := m.writeSnapshotMeta(uid, s.meta); err != nil {
			return fail(err)
		}
	}
	m.log.Info("snapshot deleted", "vm", vmName, "snapshot", name)
	return nil
}

// snapshotNamesLocked lists the snapshot names of a VM (lock held).
func (m *Manager) snapshotNamesLocked(ctx context.Context, vm *VirtualMachine) ([]string, error) {
	s, err := m.openSnapshots(ctx, vm)
	if err != nil {
		return nil, err
	}
	defer s.close()
	names := make([]string, 0, len(s.snaps))
	for _, sn := range s.snaps {
		names = append(names, sn.Name)
	}
	return names, nil
}

// hotplugChanges are the hot-plug changes of the VM's QEMU with pid
// (none when it has its command line's devices). An unreadable record
// is an error: the devices cannot be told.
func (m *Manager) hotplugChanges(uid string, pid int) ([]string, error) {
	if pid <= 0 {
		return nil, nil
	}
	rec, err := m.readHotplugRecord(uid)
	if err != nil {
		return nil, fmt.Errorf("%w: its record %s cannot be read (%v): the devices of the running QEMU are unknown", ErrHotplugged, hotplugRecordName, err)
	}
	if rec == nil || rec.PID != pid {
		return nil, nil
	}
	return rec.Changes, nil
}

// checkSnapshotDevices refuses a memory snapshot's restore onto other
// devices than those it saved the state of: snapshot-load reverts the
// disks before it reads the device state, and a state that does not fit
// leaves the guest stopped on reverted disks with half-loaded RAM. The
// devices match when the snapshot was taken with the command line's
// devices and the QEMU it goes into has had no hot-plug (or is yet to
// start), or in this very QEMU after the same hot-plugs.
func (m *Manager) checkSnapshotDevices(s *snapshotSession, name string) error {
	rec := s.meta.Snapshots[name]
	now, err := m.hotplugChanges(s.vm.Metadata.UID, s.pid)
	if err != nil {
		return err
	}
	if len(rec.Hotplugged) == 0 && len(now) == 0 {
		return nil
	}
	if len(rec.Hotplugged) > 0 && s.pid == rec.QEMUPID && slices.Equal(rec.Hotplugged, now) {
		return nil
	}
	then := "the devices of its command line"
	if len(rec.Hotplugged) > 0 {
		then = "devices hot-plugged or detached in a QEMU since ended or changed again (" + strings.Join(rec.Hotplugged, "; ") + ")"
		if s.pid == rec.QEMUPID {
			then = "the devices after " + strings.Join(rec.Hotplugged, "; ")
		}
	}
	nowS := "the devices of its command line"
	if len(now) > 0 {
		nowS = "the devices after " + strings.Join(now, "; ")
	}
	return fmt.Errorf("%w: the memory snapshot holds the state of %s, the VM has %s; restoring it would load that state into other devices (a memory snapshot restores only into the devices it was taken with)", ErrHotplugged, then, nowS)
}
