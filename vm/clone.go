package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/revert"
	"github.com/virtcon/virtcon/qmp"
)

// CloneOptions tune Clone.
type CloneOptions struct {
	// Linked makes the clone's disks overlays on a read-only layer frozen
	// from the source's disks (fast, no copy); the source goes on on a
	// new overlay of its own over that layer. Without it every disk is
	// copied.
	Linked bool
	// Start starts the clone once it is made.
	Start bool
}

// ErrHasLinkedClones is returned by Delete for a VM whose frozen disk
// layers linked clones still read.
var ErrHasLinkedClones = errors.New("has linked clones")

// LinkedClonesError is a delete refused because linked clones are backed
// by layers in the VM's directory: removing it would take their disks'
// backing files away.
type LinkedClonesError struct {
	Name   string
	Clones []string // names of the clones (UIDs where a spec cannot be read)
}

func (e *LinkedClonesError) Error() string {
	return fmt.Sprintf("vm %q: linked clones read its frozen disk layers: %s; delete them first", e.Name, strings.Join(e.Clones, ", "))
}

func (e *LinkedClonesError) Unwrap() error { return ErrHasLinkedClones }

// cloneRecordName is a clone's record in its state directory: where it
// came from and which frozen layers (files in other VMs' directories)
// its disks' backing chains read.
const cloneRecordName = "clone.json"

// cloneRecord is clone.json.
type cloneRecord struct {
	Source     string    `json:"source"`     // the source's UID
	SourceName string    `json:"sourceName"` // its name at the time
	Linked     bool      `json:"linked"`
	CreatedAt  time.Time `json:"createdAt"`
	// Layers are the read-only files of other VMs that this VM's disks
	// are backed by (the image store's base images are not listed).
	Layers []string `json:"layers,omitempty"`
}

func (m *Manager) cloneRecordPath(uid string) string {
	return filepath.Join(m.layout().VMStateDir(uid), cloneRecordName)
}

// frozenLayerPath is the read-only layer a linked clone freezes the
// source's disk into (in the source's directory). It is not named disk-*:
// it is no disk of the spec.
func (m *Manager) frozenLayerPath(uid, disk, id string) string {
	return filepath.Join(m.layout().VMStateDir(uid), "frozen-"+disk+"-"+id+".qcow2")
}

// Clone makes a new VM named name from the VM src: a copy of its spec
// with a new UID (so a new seed instance-id: cloud-init runs again), new
// MACs, its own disks, NVRAM and seed, and the source's labels less the
// reserved ones. A full clone copies each disk (a stopped source with
// qemu-img, a running one with a point-in-time block job of its QEMU,
// never a copy of a file in use); a linked clone freezes the source's
// disks into read-only layers both then read (see docs/vms.md). The new
// VM is admitted as a create is. Nothing is left of a clone that fails,
// and its source is as it was (a running source's disk chain stays
// valid).
func (m *Manager) Clone(ctx context.Context, src, name string, o CloneOptions) (*VirtualMachine, error) {
	start := time.Now()
	s, err := m.find(src)
	if err != nil {
		return nil, err
	}
	// admission first, from the spec as found: a bad name is refused
	// before any lock is waited for
	if _, err := m.cloneManifest(ctx, s, name); err != nil {
		return nil, err
	}
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return nil, err
	}
	defer g.Release()
	l, err := m.store.lockVM(ctx, s.Metadata.UID)
	if err != nil {
		return nil, err
	}
	defer l.Release()
	if s, err = m.store.load(s.Metadata.UID); err != nil {
		return nil, err
	}
	c, err := m.cloneManifest(ctx, s, name)
	if err != nil {
		return nil, err
	}
	if err := m.checkNameFree(name, ""); err != nil {
		return nil, err
	}
	what := "clone"
	if o.Linked {
		what = "linked clone"
	}
	fail := func(err error) error { return fmt.Errorf("vm %q: %s to %q: %w", s.Metadata.Name, what, name, err) }
	img, err := m.qemuImg()
	if err != nil {
		return nil, fail(err)
	}
	running := m.livePID(s.Metadata.UID) > 0
	// what an earlier clone cut short left goes first (linkleft.go)
	m.cleanLinkLeftovers(ctx, s, running)

	r := revert.New()
	defer r.Fail()
	dir := m.layout().VMStateDir(c.Metadata.UID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fail(err)
	}
	r.Add(func() error { return os.RemoveAll(dir) })
	if err := m.copyVarsOf(ctx, s.Metadata.UID, c.Metadata.UID, running); err != nil {
		return nil, fail(err)
	}
	rec := cloneRecord{Source: s.Metadata.UID, SourceName: s.Metadata.Name, Linked: o.Linked, CreatedAt: time.Now().UTC()}
	disks := make([]cloneDisk, len(s.Spec.Disks))
	for i, d := range s.Spec.Disks {
		from := m.diskPath(s.Metadata.UID, d.Name)
		chain, err := m.backingChain(ctx, img, from)
		if err != nil {
			return nil, fail(fmt.Errorf("disk %q: %w", d.Name, err))
		}
		disks[i] = cloneDisk{name: d.Name, from: from, to: m.diskPath(c.Metadata.UID, d.Name), chain: chain}
		if o.Linked && len(chain[0].Snapshots) > 0 {
			return nil, fail(fmt.Errorf("disk %q has %d snapshot(s): a linked clone would freeze them in a read-only layer where they could no longer be restored; delete them (virt vm snapshot delete) or make a full clone", d.Name, len(chain[0].Snapshots)))
		}
	}
	switch {
	case o.Linked:
		err = m.linkDisks(ctx, r, img, s, c.Metadata.UID, disks, running)
	case running:
		err = m.backupDisks(ctx, img, s, c.Metadata.UID, disks)
	default:
		err = m.copyDisks(ctx, img, disks)
	}
	if err != nil {
		return nil, fail(err)
	}
	for i, d := range disks {
		if err := os.Chmod(d.to, 0o600); err != nil {
			return nil, fail(err)
		}
		if o.Linked {
			// the clone's chain: its overlay, the frozen layer (the
			// source's disk as it was), then what that was backed by
			rec.Layers = append(rec.Layers, m.frozenLayerPath(s.Metadata.UID, s.Spec.Disks[i].Name, c.Metadata.UID[:8]))
			rec.Layers = append(rec.Layers, m.vmFiles(d.chain[1:])...)
		}
	}
	if len(rec.Layers) > 0 {
		b, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return nil, fail(err)
		}
		if err := atomicfile.Write(m.cloneRecordPath(c.Metadata.UID), append(b, '\n'), 0o600); err != nil {
			return nil, fail(err)
		}
	}
	// the seed now, so the clone never carries the source's: it holds
	// the clone's UID as its instance-id (start writes it again)
	if err := writeSeed(filepath.Join(dir, "seed.iso"), c); err != nil {
		return nil, fail(err)
	}
	if err := m.store.save(c); err != nil {
		return nil, fail(err)
	}
	r.Success()
	m.log.Info("vm cloned", "vm", s.Metadata.Name, "clone", name, "uid", c.Metadata.UID, "linked", o.Linked, "source_running", running, "took", time.Since(start))
	l.Release()
	g.Release()
	if o.Start {
		if err := m.Start(ctx, c.Metadata.UID); err != nil {
			return c, &NotStartedError{Name: name, UID: c.Metadata.UID, Err: err}
		}
		return m.store.load(c.Metadata.UID)
	}
	return c, nil
}

// cloneManifest is the clone of s named name, admitted as a create is.
func (m *Manager) cloneManifest(ctx context.Context, s *VirtualMachine, name string) (*VirtualMachine, error) {
	uid := uuid.NewString()
	c := &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: name, UID: uid}, Spec: copySpec(s.Spec)}
	for k, v := range s.Metadata.Labels {
		// reserved labels are the host's record of the source (the
		// director's generation among them): the clone is no such VM
		if !strings.HasPrefix(k, ReservedLabelPrefix) {
			if c.Metadata.Labels == nil {
				c.Metadata.Labels = map[string]string{}
			}
			c.Metadata.Labels[k] = v
		}
	}
	c.Spec.Running = false
	// every MAC is new, a source's explicit one as well: two NICs with
	// one MAC on a bridge break both
	for i := range c.Spec.Network {
		c.Spec.Network[i].MAC = MACFor(uid, i)
	}
	Defaults(c)
	if err := Validate(c, m.limits(ctx)); err != nil {
		return nil, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	c.Metadata.CreationTimestamp = &now
	c.Metadata.Generation = 1
	return c, nil
}

// copySpec copies a spec deeply: the clone's must share nothing with
// the source's.
func copySpec(s Spec) Spec {
	c := s
	c.Disks = append([]Disk(nil), s.Disks...)
	c.Network = append([]NIC(nil), s.Network...)
	if s.Boot != nil {
		b := *s.Boot
		c.Boot = &b
	}
	if s.CloudInit != nil {
		ci := *s.CloudInit
		c.CloudInit = &ci
	}
	if s.CDROM != nil {
		cd := *s.CDROM
		c.CDROM = &cd
	}
	if s.Startup != nil {
		st := *s.Startup
		if st.Delay != nil {
			d := *st.Delay
			st.Delay = &d
		}
		c.Startup = &st
	}
	return c
}

// copyVarsOf is copyVars; a running source's guest is paused for it
// (QEMU's stop drains and flushes its pflash), so that a variable the
// firmware writes meanwhile is not copied half written.
func (m *Manager) copyVarsOf(ctx context.Context, from, to string, running bool) error {
	if _, err := os.Stat(filepath.Join(m.layout().VMStateDir(from), "OVMF_VARS.fd")); !running || err != nil {
		return m.copyVars(from, to)
	}
	return m.qmpDo(ctx, from, func(ctx context.Context, mon *qmp.Monitor) error {
		resume, err := pauseGuest(ctx, mon)
		if err != nil {
			return fmt.Errorf("OVMF variables: %w", err)
		}
		err = m.copyVars(from, to)
		if rerr := resume(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	})
}

// copyVars gives the clone its own copy of the source's UEFI variables
// (boot entries an installer wrote live there). A source without one
// leaves the clone to get a fresh copy of the template at its start.
func (m *Manager) copyVars(from, to string) error {
	b, err := os.ReadFile(filepath.Join(m.layout().VMStateDir(from), "OVMF_VARS.fd"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("OVMF variables: %w", err)
	}
	return atomicfile.Write(filepath.Join(m.layout().VMStateDir(to), "OVMF_VARS.fd"), b, 0o600)
}

// cloneDisk is one disk being cloned.
type cloneDisk struct {
	name     string
	from, to string
	chain    []chainImage // from's backing chain, from first
}

// chainImage is one entry of `qemu-img info --backing-chain`.
type chainImage struct {
	Filename            string `json:"filename"`
	Format              string `json:"format"`
	VirtualSize         int64  `json:"virtual-size"`
	FullBackingFilename string `json:"full-backing-filename"`
	BackingFilenameFmt  string `json:"backing-filename-format"`
	Snapshots           []struct {
		Name string `json:"name"`
	} `json:"snapshots"`
}

// backingChain reads a disk's chain. -U: a running QEMU holds the image
// (reading its header is safe; its data is never copied from the file).
func (m *Manager) backingChain(ctx context.Context, img, path string) ([]chainImage, error) {
	// the headers themselves first: a process costs a linked clone of a
	// stopped VM a third of its time (readChain); qemu-img for the rest
	if chain, err := readChain(path); err == nil {
		return chain, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := childCommand(ctx, img, "info", "-U", "--backing-chain", "--output=json", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := runChild(cmd); err != nil {
		return nil, fmt.Errorf("qemu-img info %s: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	var chain []chainImage
	if err := json.Unmarshal(stdout.Bytes(), &chain); err != nil || len(chain) == 0 {
		return nil, fmt.Errorf("qemu-img info %s: unreadable chain (%v)", path, err)
	}
	return chain, nil
}

// imageBase is the base image the chain rests on when it is exactly an
// overlay on a file of the image store (read-only there, never
// replaced while overlays use it): a copy may stay backed by it.
func (m *Manager) imageBase(chain []chainImage) *chainImage {
	if len(chain) != 2 {
		return nil
	}
	rel, err := filepath.Rel(m.layout().ImagesDir(), chain[1].Filename)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	return &chain[1]
}

// vmFiles lists the files of a chain that live in a VM's state
// directory (frozen layers; the image store's bases are not).
func (m *Manager) vmFiles(chain []chainImage) []string {
	vms := filepath.Join(m.layout().StateDir(), "vms") + string(filepath.Separator)
	var out []string
	for _, c := range chain {
		if strings.HasPrefix(c.Filename, vms) {
			out = append(out, c.Filename)
		}
	}
	return out
}

// copyDisks copies a stopped source's disks (its lock is held: it cannot
// start meanwhile). An overlay on a base image stays backed by it (only
// the overlay's data is copied); any other chain is flattened.
func (m *Manager) copyDisks(ctx context.Context, img string, disks []cloneDisk) error {
	for _, d := range disks {
		args := []string{"convert", "-q", "-O", "qcow2"}
		// qemu-img 7.2's convert -B copies only the top image's data: it
		// is right for exactly overlay-on-base, and wrong under frozen
		// layers (their data would be lost), which are flattened instead
		if b := m.imageBase(d.chain); b != nil {
			args = append(args, "-B", b.Filename, "-F", b.Format)
		}
		args = append(args, d.from, d.to)
		// no time limit but ctx's: a copy takes as long as the disk is
		// big; the copy dies with this process (runChild): once the lock
		// is gone nothing may write the clone's files
		var out bytes.Buffer
		cmd := childCommand(ctx, img, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := runChild(cmd); err != nil {
			return fmt.Errorf("disk %q: qemu-img convert: %v: %s", d.name, err, strings.TrimSpace(out.String()))
		}
	}
	return nil
}

// backupDisks copies a running source's disks with QEMU's backup job:
// the copy is the disks as they were at one instant (the jobs of all the
// disks start in one transaction), written by QEMU, which alone may read
// a disk it is writing. An overlay on a base image is copied as an
// overlay on it (sync top), any other chain whole (sync full).
func (m *Manager) backupDisks(ctx context.Context, img string, s *VirtualMachine, cloneUID string, disks []cloneDisk) error {
	if len(disks) == 0 {
		return nil
	}
	uid := s.Metadata.UID
	for _, d := range disks {
		args := []string{"create", "-q", "-f", "qcow2"}
		if b := m.imageBase(d.chain); b != nil {
			args = append(args, "-u", "-b", b.Filename, "-F", b.Format)
		}
		args = append(args, d.to, strconv.FormatInt(d.chain[0].VirtualSize, 10))
		if err := runTool(ctx, img, args...); err != nil {
			return fmt.Errorf("disk %q: %w", d.name, err)
		}
	}
	mon, err := m.dialQMP(ctx, uid)
	if err != nil {
		return fmt.Errorf("QMP: %w", err)
	}
	defer mon.Close()
	// QEMU copying the disks (and a guest writing them) answers late
	// under load: an exchange missing one bound closed the monitor and
	// failed the clone ("query-jobs: no reply", 2 of 7 real-size runs),
	// so each gets a busy QEMU's bound
	qctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), m.busyQMPBound())
	}
	node := func(i int) string { return fmt.Sprintf("%s%s-%d", cloneJobPrefix, cloneUID[:8], i) }
	job := func(i int) string { return fmt.Sprintf("%s%s-%d", cloneJobPrefix, cloneUID[:8], i) }
	// recorded before the first node or job exists: a virt killed from
	// here on leaves the record, and the next session under the source's
	// lock cancels what is left (leftover.go); it goes once none is left
	if err := m.recordCloneJobs(uid, cloneUID); err != nil {
		return fmt.Errorf("record the backup jobs: %w", err)
	}
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if left, err := cancelCloneJobs(c, mon, fmt.Sprintf("%s%s-", cloneJobPrefix, cloneUID[:8])); err != nil {
			m.log.Warn("clone: backup jobs or targets left in the source's QEMU; the next command on it cancels them", "vm", s.Metadata.Name, "removed", left, "err", err)
			return
		}
		os.Remove(m.runPath(uid, cloneJobsName))
	}()
	var added []string
	defer func() {
		// the targets leave QEMU whatever happened: the clone's files
		// must be no open image of the source's QEMU
		for _, n := range added {
			c, cancel := qctx()
			if err := mon.Execute(c, "blockdev-del", map[string]any{"node-name": n}, nil); err != nil {
				m.log.Warn("clone: blockdev-del of a backup target failed", "vm", s.Metadata.Name, "node", n, "err", err)
			}
			cancel()
		}
	}()
	c, cancel := qctx()
	ids, err := liveDiskIDs(c, mon, disks)
	cancel()
	if err != nil {
		return err
	}

	var actions []map[string]any
	for i, d := range disks {
		c, cancel := qctx()
		err = mon.Execute(c, "blockdev-add", map[string]any{
			"driver": "qcow2", "node-name": node(i),
			"file": map[string]any{"driver": "file", "filename": d.to},
		}, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("disk %q: QMP blockdev-add of the copy: %w", d.name, err)
		}
		added = append(added, node(i))
		sync := "full"
		if m.imageBase(d.chain) != nil {
			sync = "top"
		}
		actions = append(actions, map[string]any{"type": "blockdev-backup", "data": map[string]any{
			"job-id": job(i), "device": ids[i].id(), "target": node(i), "sync": sync,
			"auto-dismiss": false,
		}})
	}
	// the transaction drains the disks first (a guest writing makes it
	// late): bounded by the clone's deadline, not one exchange's, and
	// not cut by a cancel (the jobs it starts are waited for below)
	c, cancel = context.WithoutCancel(ctx), func() {}
	if d, ok := ctx.Deadline(); ok {
		c, cancel = context.WithDeadline(c, d)
	}
	err = m.execLong(c, mon, nil, "transaction", map[string]any{"actions": actions}, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("QMP transaction (blockdev-backup): %w", err)
	}
	// wait for every job to conclude, then dismiss it; a failed one (or
	// ctx ending) cancels the rest
	pending := map[string]string{}
	for i, d := range disks {
		pending[job(i)] = d.name
	}
	var jobErr error
	cancelAll := func() {
		for id := range pending {
			c, cancel := qctx()
			_ = mon.Execute(c, "job-cancel", map[string]any{"id": id}, nil)
			cancel()
		}
	}
	for len(pending) > 0 {
		type jobInfo struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		var jobs []jobInfo
		c, cancel := qctx()
		err := mon.Execute(c, "query-jobs", nil, &jobs)
		cancel()
		if err != nil {
			cancelAll()
			return fmt.Errorf("QMP query-jobs: %w", err)
		}
		for _, j := range jobs {
			disk, ok := pending[j.ID]
			if !ok || j.Status != "concluded" {
				continue
			}
			if j.Error != "" && jobErr == nil {
				jobErr = fmt.Errorf("disk %q: backup job: %s", disk, j.Error)
			}
			c, cancel := qctx()
			_ = mon.Execute(c, "job-dismiss", map[string]any{"id": j.ID}, nil)
			cancel()
			delete(pending, j.ID)
		}
		if jobErr != nil || ctx.Err() != nil {
			cancelAll()
			if jobErr == nil {
				jobErr = fmt.Errorf("backup: %w", ctx.Err())
			}
		}
		if len(pending) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return jobErr
}

// linkDisks freezes the source's disks into read-only layers and makes
// the clone's disks overlays on them.
//
// A stopped source: disk-<name>.qcow2 is renamed to its frozen layer and
// a new overlay on that layer takes its place.
//
// A running source: QEMU knows its files by name and reopens a disk by
// that name when it turns it into a read-only backing layer, so no name
// it uses may point elsewhere before that. The frozen layer is first a
// second name (hard link) of the live disk; a new overlay on it (its
// header names the layer from the first byte) is made under a live-*
// name; QEMU moves onto the new overlays in one transaction
// (blockdev-snapshot-sync, mode existing); only then does
// disk-<name>.qcow2 become a name of the new overlay (link and rename
// over). The live-* name stays while that QEMU runs: it is the name QEMU
// has for its active layer (a later clone reopens it by it); a clone of
// the stopped VM removes it.
func (m *Manager) linkDisks(ctx context.Context, r *revert.Stack, img string, s *VirtualMachine, cloneUID string, disks []cloneDisk, running bool) error {
	if len(disks) == 0 {
		return nil
	}
	// A stopped source is put back as it was if anything of the clone
	// fails (r). A running source's side has its own stack: once its
	// QEMU is on the new overlays, they and the frozen layers are its
	// disks (a valid chain) and stay whatever else fails.
	sr := r
	if running {
		sr = revert.New()
		defer sr.Fail()
	} else {
		m.removeLiveNames(s.Metadata.UID)
	}
	id := cloneUID[:8]
	frozen := make([]string, len(disks))
	live := make([]string, len(disks))
	for i, d := range disks {
		frozen[i] = m.frozenLayerPath(s.Metadata.UID, d.name, id)
		live[i] = filepath.Join(m.layout().VMStateDir(s.Metadata.UID), "live-"+d.name+"-"+id+".qcow2")
		size := d.chain[0].VirtualSize
		from, f, lv := d.from, frozen[i], live[i]
		if _, err := os.Lstat(f); err == nil {
			return fmt.Errorf("disk %q: freeze: %s exists", d.name, f)
		}
		top := from // where the source's new overlay is made
		if running {
			if err := os.Link(from, f); err != nil {
				return fmt.Errorf("disk %q: freeze: %w", d.name, err)
			}
			sr.Add(func() error { return os.Remove(f) })
			top = lv
		} else {
			if err := os.Rename(from, f); err != nil {
				return fmt.Errorf("disk %q: freeze: %w", d.name, err)
			}
			sr.Add(func() error { return os.Rename(f, from) })
		}
		// the layer is not opened (a running QEMU holds it for writing
		// until the snapshot below), the size is given instead
		if err := makeOverlay(ctx, img, f, top, size); err != nil {
			os.Remove(top)
			return fmt.Errorf("disk %q: source overlay: %w", d.name, err)
		}
		sr.Add(func() error { return os.Remove(top) })
		if err := os.Chmod(top, 0o600); err != nil {
			return err
		}
	}
	if running {
		err := m.qmpDo(ctx, s.Metadata.UID, func(ctx context.Context, mon *qmp.Monitor) error {
			ids, err := liveDiskIDs(ctx, mon, disks)
			if err != nil {
				return err
			}
			var actions []map[string]any
			for i := range disks {
				actions = append(actions, map[string]any{"type": "blockdev-snapshot-sync", "data": map[string]any{
					// the disk's active layer (qmpDiskID): a disk of the
					// command line by its drive, a hot-plugged one by its
					// active node, which needs the new overlay's node
					// named too
					"snapshot-node-name": fmt.Sprintf("ov-%s-%d", id, i),
					"snapshot-file":      live[i], "format": "qcow2", "mode": "existing",
				}})
				// blockdev-snapshot-sync's device is a BlockBackend's
				// name only; a node goes in node-name
				data := actions[i]["data"].(map[string]any)
				if ids[i].device != "" {
					data["device"] = ids[i].device
				} else {
					data["node-name"] = ids[i].node
				}
			}
			return mon.Execute(ctx, "transaction", map[string]any{"actions": actions}, nil)
		})
		if err != nil {
			// the transaction is all or nothing: QEMU is still on the
			// old files, and the stack removes the new names
			return fmt.Errorf("QMP transaction (blockdev-snapshot-sync): %w", err)
		}
		sr.Success()
		for i, d := range disks {
			if err := m.takeName(live[i], d.from); err != nil {
				return fmt.Errorf("disk %q: the source runs on %s, but %s could not be made its name: %w", d.name, live[i], d.from, err)
			}
		}
	}
	for i, d := range disks {
		// the layer is read by the source and the clone from now on:
		// nobody may write it (a running QEMU reopened it read-only)
		if err := os.Chmod(frozen[i], 0o444); err != nil {
			return fmt.Errorf("disk %q: freeze: %w", d.name, err)
		}
		f := frozen[i]
		sr.Add(func() error { return os.Chmod(f, 0o600) })
		if err := makeOverlay(ctx, img, frozen[i], d.to, d.chain[0].VirtualSize); err != nil {
			return fmt.Errorf("disk %q: clone overlay: %w", d.name, err)
		}
	}
	// the source's new names (its frozen layers and new overlays) are
	// durable before the clone's record names them
	return syncDir(m.layout().VMStateDir(s.Metadata.UID))
}

// takeName makes name a name of the file at live, atomically (name's
// old file keeps its other names). live stays a name too; if no second
// name can be made, live is renamed (the running QEMU's name for it is
// then gone, but the next start boots the right file).
func (m *Manager) takeName(live, name string) error {
	tmp := name + ".new"
	os.Remove(tmp)
	if err := os.Link(live, tmp); err != nil {
		m.log.Warn("clone: no second name for the live overlay; renaming it", "file", live, "err", err)
		return os.Rename(live, name)
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(name))
}

// removeLiveNames drops the live-* names a running source's linked
// clone left (see linkDisks) once no QEMU uses them: a file that has no
// other name is kept.
func (m *Manager) removeLiveNames(uid string) {
	names, _ := filepath.Glob(filepath.Join(m.layout().VMStateDir(uid), "live-*.qcow2"))
	for _, p := range names {
		if fi, err := os.Stat(p); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				os.Remove(p)
			}
		}
	}
}

// linkedClonesOf lists the VMs whose recorded frozen layers lie in the
// directory of uid. It fails closed: a record that cannot be read may
// be such a clone's.
func (m *Manager) linkedClonesOf(uid string) ([]string, error) {
	uids, err := m.store.uids()
	if err != nil {
		return nil, err
	}
	dir := m.layout().VMStateDir(uid) + string(filepath.Separator)
	var out []string
	for _, u := range uids {
		if u == uid {
			continue
		}
		rec, err := m.readCloneRecord(u)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			continue
		}
		for _, p := range rec.Layers {
			if strings.HasPrefix(p, dir) {
				name := u
				if vm, err := m.store.load(u); err == nil {
					name = vm.Metadata.Name
				}
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}

// readCloneRecord reads uid's clone.json; nil when it has none.
func (m *Manager) readCloneRecord(uid string) (*cloneRecord, error) {
	b, err := os.ReadFile(m.cloneRecordPath(uid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vm %s: clone record: %w", uid, err)
	}
	var rec cloneRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("vm %s: clone record %s: %w", uid, m.cloneRecordPath(uid), err)
	}
	return &rec, nil
}

// checkNoLinkedClones refuses to delete a VM whose frozen layers back
// linked clones (called by Delete under the global lock, which Clone
// holds too).
func (m *Manager) checkNoLinkedClones(vm *VirtualMachine) error {
	clones, err := m.linkedClonesOf(vm.Metadata.UID)
	if err != nil {
		return fmt.Errorf("vm %q: delete: cannot tell whether linked clones use its disks: %w", vm.Metadata.Name, err)
	}
	if len(clones) > 0 {
		return &LinkedClonesError{Name: vm.Metadata.Name, Clones: clones}
	}
	return nil
}

// layerDirsInUse are the state directories (by UID) holding a layer
// some clone's record names: never orphans, even without a spec (a
// delete cut short), or gc would take a clone's backing file.
func (m *Manager) layerDirsInUse() map[string]bool {
	out := map[string]bool{}
	uids, _ := m.store.uids()
	vms := filepath.Join(m.layout().StateDir(), "vms") + string(filepath.Separator)
	for _, u := range uids {
		rec, err := m.readCloneRecord(u)
		if err != nil || rec == nil {
			continue
		}
		for _, p := range rec.Layers {
			if rest, ok := strings.CutPrefix(p, vms); ok {
				out[strings.SplitN(rest, string(filepath.Separator), 2)[0]] = true
			}
		}
	}
	return out
}

// liveDisk is a disk's block backend in the running QEMU: its
// BlockBackend's name (a -drive's; "" for a hot-plugged disk) and its
// active node.
type liveDisk struct{ device, node string }

// id is its qmpDiskID.
func (l liveDisk) id() string { return qmpDiskID(l.device, l.node) }

// liveDiskIDs finds each disk's active layer in the running QEMU, from
// query-block.
func liveDiskIDs(ctx context.Context, mon *qmp.Monitor, disks []cloneDisk) ([]liveDisk, error) {
	var blocks []qmpBlock
	if err := mon.Execute(ctx, "query-block", nil, &blocks); err != nil {
		return nil, fmt.Errorf("QMP query-block: %w", err)
	}
	ids := make([]liveDisk, len(disks))
	for i, d := range disks {
		j := slices.IndexFunc(blocks, func(b qmpBlock) bool {
			return b.Inserted != nil && isDiskBlock(d.name, b.Device, b.Qdev, b.Inserted.NodeName)
		})
		if j < 0 {
			return nil, fmt.Errorf("disk %q: not attached to the running QEMU (no block device %s)", d.name, DiskDriveID(d.name))
		}
		ids[i] = liveDisk{device: blocks[j].Device, node: blocks[j].Inserted.NodeName}
	}
	return ids, nil
}
