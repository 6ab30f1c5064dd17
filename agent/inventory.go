package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// Inventory timing: changes seen within coalesceWindow go out as one
// delta; a reconciliation List every reconcileEvery catches what events
// miss (EXTERNAL guests and orphans have no events).
const (
	defaultCoalesce       = 100 * time.Millisecond
	defaultReconcileEvery = 5 * time.Minute
	// deltaBuffer is how many deltas wait for the session. When it is
	// full no delta is made: the changes stay pending and go out in one
	// later delta, so the generations the director sees stay continuous.
	deltaBuffer = 64
)

// inventory is the host's VM inventory as the director sees it: a full
// Inventory in answer to each Resync, then deltas as VMs change, made
// from QMP events and inotify (inventory_watch.go), never from polling
// managed VMs. It reads VMs only (List, Peek); it changes nothing.
//
// The epoch is random per process; generation counts the changes reported
// in it: a Full carries the current generation, each later delta the one
// before plus one.
type inventory struct {
	vms   *vm.Manager
	l     paths.Layout
	log   *slog.Logger
	epoch string

	coalesce       time.Duration
	reconcileEvery time.Duration

	// mu guards what the director was told: the generation, the VMs as
	// last reported, and the delta channel (a Full drains it under mu).
	mu     sync.Mutex
	gen    uint64
	full   bool // a Full was made: deltas have something to follow
	cur    map[string]*directorv1.InventoryVM
	deltas chan *directorv1.InventoryDelta

	// pmu guards the VMs to look at again and what events said of them.
	pmu     sync.Mutex
	pending map[string]bool
	phase   map[string]string // live phase from the VM's QMP events
	kick    chan struct{}     // cap 1: pending has something

	// reconcileChanges counts what reconciliations found that events
	// had missed (tests: 0 in normal flows).
	reconcileChanges atomic.Int64
}

func newInventory(vms *vm.Manager, l paths.Layout, log *slog.Logger) *inventory {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &inventory{
		vms: vms, l: l, log: log, epoch: hex.EncodeToString(b[:]),
		coalesce: defaultCoalesce, reconcileEvery: defaultReconcileEvery,
		cur:     map[string]*directorv1.InventoryVM{},
		deltas:  make(chan *directorv1.InventoryDelta, deltaBuffer),
		pending: map[string]bool{},
		phase:   map[string]string{},
		kick:    make(chan struct{}, 1),
	}
}

// Deltas delivers the changes after the last Full, each generation one
// more than the one before. A Full discards the deltas not yet taken:
// they are in it.
func (iv *inventory) Deltas() <-chan *directorv1.InventoryDelta { return iv.deltas }

// Full lists every VM on the host (as `virt vm list` classifies them) and
// returns the whole inventory answering resyncID. It fails closed: a VM
// store that cannot be listed is an error, not an empty inventory. A
// spec that cannot be read is an UNREADABLE row of its own.
func (iv *inventory) Full(ctx context.Context, resyncID string) (*directorv1.Inventory, error) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	now, err := iv.list(ctx)
	if err != nil {
		return nil, err
	}
	iv.drainLocked()
	iv.cur, iv.full = now, true
	return &directorv1.Inventory{Epoch: iv.epoch, Generation: iv.gen, ResyncId: resyncID, Vms: sortedVMs(now)}, nil
}

// drainLocked drops the deltas not yet taken: a Full supersedes them.
// Caller holds mu.
func (iv *inventory) drainLocked() {
	for {
		select {
		case <-iv.deltas:
		default:
			return
		}
	}
}

// list runs vm.List and converts its rows, keyed by UID.
func (iv *inventory) list(ctx context.Context) (map[string]*directorv1.InventoryVM, error) {
	entries, err := iv.vms.List(ctx)
	if err != nil {
		if entries == nil {
			return nil, fmt.Errorf("inventory: vm list: %w", err)
		}
		// an unreadable spec is a row of its own; the rest is whole
		iv.log.Debug("inventory: vm list", "err", err)
	}
	out := make(map[string]*directorv1.InventoryVM, len(entries))
	asked := map[string]bool{} // live VMs whose phase QMP gave just now
	for _, e := range entries {
		v := inventoryVM(e)
		if _, dup := out[v.Uid]; !dup {
			out[v.Uid] = v // an orphan's state, run and log dirs share a UID: one row
		}
		if e.Class == vm.ClassManaged && e.PID > 0 && e.Message == "" {
			asked[v.Uid] = true // observeLive leaves a message when QMP did not answer
		}
	}
	iv.overlayPhases(out, asked)
	return out, nil
}

// overlayPhases puts the phases QMP events reported over the rows of
// live managed VMs, except those in asked: QMP's answer of a moment ago
// is the truth, and becomes what the events said (an event dropped from
// a full buffer is made good here).
func (iv *inventory) overlayPhases(vms map[string]*directorv1.InventoryVM, asked map[string]bool) {
	iv.pmu.Lock()
	defer iv.pmu.Unlock()
	for uid, p := range iv.phase {
		v, ok := vms[uid]
		switch {
		case !ok || v.Class != vm.ClassManaged || !livePhase(v.Phase):
		case asked[uid]:
			iv.phase[uid] = v.Phase
		default:
			v.Phase = p
		}
	}
}

// livePhase reports whether a phase is one of a running QEMU's.
func livePhase(p string) bool {
	switch p {
	case vm.PhaseRunning, vm.PhasePaused, vm.PhaseShuttingDown, vm.PhaseUnresponsive, vm.PhaseError:
		return true
	}
	return false
}

// inventoryVM is what the director is told of one row of `virt vm list`:
// identity, class, phase, generations (the host's and the director's
// opaque label value), resources. Never user data, other labels, cloud-init, disk or file paths, nor the free-text message
// (it can carry paths and QMP errors).
func inventoryVM(e vm.Entry) *directorv1.InventoryVM {
	v := &directorv1.InventoryVM{
		Uid: e.UID, Name: e.Name, Class: e.Class, Phase: e.Phase,
		Generation: e.Generation, ObservedGeneration: e.ObservedGeneration,
		DirectorGeneration: e.DirectorGeneration, Source: e.Source, Reason: e.Reason,
	}
	if e.CPUs > 0 {
		v.Cpus = uint32(e.CPUs)
	}
	if e.MemoryMiB > 0 {
		v.MemoryMib = uint64(e.MemoryMiB)
	}
	if !e.StartedAt.IsZero() {
		v.StartedAtUnixMs = e.StartedAt.UnixMilli()
	}
	switch e.Class {
	case vm.ClassOrphaned:
		// what it is, without where: the message is "WHAT: PATH"
		if v.Reason == "" {
			v.Reason = e.Message
			if e.Path != "" {
				v.Reason = strings.TrimSuffix(e.Message, ": "+e.Path)
			}
		}
		if v.Uid == "" {
			// a TAP or an image file has no UID: a stable key that says
			// nothing of the path
			sum := sha256.Sum256([]byte(e.Path))
			v.Uid = "orphan-" + hex.EncodeToString(sum[:8])
		}
	case vm.ClassUnreadable:
		if v.Reason == "" {
			v.Reason = "spec unreadable"
		}
	}
	return v
}

func sortedVMs(m map[string]*directorv1.InventoryVM) []*directorv1.InventoryVM {
	out := make([]*directorv1.InventoryVM, 0, len(m))
	for _, v := range m {
		out = append(out, proto.Clone(v).(*directorv1.InventoryVM))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Uid < out[j].Uid })
	return out
}

// diff applies now (the VMs in uids, or all when uids is nil) to cur and
// returns what changed. Caller holds mu.
func (iv *inventory) diffLocked(now map[string]*directorv1.InventoryVM, uids map[string]bool) (upserts []*directorv1.InventoryVM, removed []string) {
	for uid, v := range now {
		if uids != nil && !uids[uid] {
			continue
		}
		if old, ok := iv.cur[uid]; ok && proto.Equal(old, v) {
			continue
		}
		iv.cur[uid] = v
		upserts = append(upserts, proto.Clone(v).(*directorv1.InventoryVM))
	}
	for uid := range iv.cur {
		if uids != nil && !uids[uid] {
			continue
		}
		if _, ok := now[uid]; !ok {
			delete(iv.cur, uid)
			removed = append(removed, uid)
		}
	}
	sort.Slice(upserts, func(i, j int) bool { return upserts[i].Uid < upserts[j].Uid })
	sort.Strings(removed)
	return upserts, removed
}

// emitLocked sends one delta with the next generation. It reports false
// (and changes nothing) when the channel is full. Caller holds mu.
func (iv *inventory) emitLocked(upserts []*directorv1.InventoryVM, removed []string) bool {
	d := &directorv1.InventoryDelta{Epoch: iv.epoch, Generation: iv.gen + 1, Upserts: upserts, RemovedUids: removed}
	select {
	case iv.deltas <- d:
		iv.gen++
		return true
	default:
		return false
	}
}

// reconcile lists every VM and reports in one delta what events missed.
// It returns how many VMs changed.
func (iv *inventory) reconcile(ctx context.Context) (int, error) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if !iv.full {
		return 0, nil // nothing reported yet: the next Full has it all
	}
	if len(iv.deltas) == cap(iv.deltas) {
		return 0, nil // the session is not taking deltas; try next time
	}
	now, err := iv.list(ctx)
	if err != nil {
		return 0, err
	}
	up, rm := iv.diffLocked(now, nil)
	n := len(up) + len(rm)
	if n > 0 {
		iv.emitLocked(up, rm) // room checked above, under mu
		iv.reconcileChanges.Add(int64(n))
		iv.log.Info(fmt.Sprintf("inventory: reconcile found %d changes", n))
	} else {
		iv.log.Debug("inventory: reconcile found 0 changes")
	}
	return n, nil
}
