package director

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/virtcon/virtcon/api/directorv1"
)

// Resync reasons.
const (
	ResyncRegister = "register"
	ResyncGap      = "gap"
	ResyncAdmin    = "admin"
)

// resyncTTL is how long a resync/<node> request is kept.
const resyncTTL = time.Hour

// resyncPatience is how long a Resync sent keeps a gap quiet: an agent
// that could not make the full inventory (it only logs that) never
// answers, and without a limit every later gap would be dropped for the
// rest of the session, the stored inventory stale.
const resyncPatience = 30 * time.Second

// inventoryRecord is inventory/<node>: the node's VMs as its agent last
// told them, rewritten on each change.
type inventoryRecord struct {
	V          int           `json:"v"`
	Epoch      string        `json:"epoch"`
	Generation uint64        `json:"generation"`
	At         int64         `json:"at"`
	VMs        []inventoryVM `json:"vms"`
}

type inventoryVM struct {
	UID                string `json:"uid"`
	Name               string `json:"name"`
	Class              string `json:"class,omitempty"`
	Phase              string `json:"phase,omitempty"`
	Generation         int64  `json:"generation,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	DirectorGeneration string `json:"directorGeneration,omitempty"`
	CPUs               uint32 `json:"cpus,omitempty"`
	MemoryMiB          uint64 `json:"memoryMiB,omitempty"`
	Source             string `json:"source,omitempty"`
	Reason             string `json:"reason,omitempty"`
	StartedAt          int64  `json:"startedAt,omitempty"`
}

func invVM(v *directorv1.InventoryVM) inventoryVM {
	return inventoryVM{
		UID: truncate(v.GetUid(), 64), Name: truncate(v.GetName(), 253), Class: truncate(v.GetClass(), 32),
		Phase: truncate(v.GetPhase(), 64), Generation: v.GetGeneration(), ObservedGeneration: v.GetObservedGeneration(),
		DirectorGeneration: truncate(v.GetDirectorGeneration(), 63), CPUs: v.GetCpus(), MemoryMiB: v.GetMemoryMib(),
		Source: truncate(v.GetSource(), 32), Reason: truncate(v.GetReason(), 200), StartedAt: v.GetStartedAtUnixMs(),
	}
}

// nodeInventory is a held node's inventory in memory, to tell a delta
// that follows from one that does not.
type nodeInventory struct {
	epoch string
	gen   uint64
	vms   map[string]inventoryVM
	// resync is the id of the Resync sent (at resyncAt) and not answered
	// yet: deltas that do not follow are dropped quietly meanwhile, for
	// resyncPatience.
	resync   string
	resyncAt time.Time
	// held are deltas that came while the Resync was on its way: the
	// agent sends its answer from a goroutine of its own, so the delta
	// after the Full can arrive first. Applied after the Full when they
	// follow it.
	held []*directorv1.InventoryDelta
}

// maxHeldDeltas bounds the deltas held for a Full on its way.
const maxHeldDeltas = 64

// apply applies delta when it follows n (the same epoch, the next
// generation); false otherwise, n unchanged.
func (n *nodeInventory) apply(delta *directorv1.InventoryDelta) bool {
	if n.epoch == "" || n.epoch != delta.GetEpoch() || delta.GetGeneration() != n.gen+1 {
		return false
	}
	n.gen = delta.GetGeneration()
	for _, v := range delta.GetUpserts() {
		if v.GetUid() != "" {
			n.vms[v.GetUid()] = invVM(v)
		}
	}
	for _, uid := range delta.GetRemovedUids() {
		delete(n.vms, uid)
	}
	return true
}

func (n *nodeInventory) record(now time.Time) *inventoryRecord {
	r := &inventoryRecord{V: recordVersion, Epoch: n.epoch, Generation: n.gen, At: ms(now),
		VMs: make([]inventoryVM, 0, len(n.vms))}
	for _, v := range n.vms {
		r.VMs = append(r.VMs, v)
	}
	slices.SortFunc(r.VMs, func(a, b inventoryVM) int { return cmp.Compare(a.UID, b.UID) })
	return r
}

// resync asks the session's agent for a full inventory.
func (d *Director) resync(s *liveSession, id, reason string) {
	if id == "" {
		id = uuid.NewString()
	}
	d.invMu.Lock()
	n := d.inv[s.node]
	if n == nil {
		n = &nodeInventory{}
		d.inv[s.node] = n
	}
	n.resync, n.resyncAt = id, d.now()
	d.invMu.Unlock()
	s.enqueue(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Resync{Resync: &directorv1.Resync{
		ResyncId: id, Reason: reason}}})
}

// fullInventory replaces the node's inventory with the agent's.
func (d *Director) fullInventory(s *liveSession, inv *directorv1.Inventory) {
	n := &nodeInventory{epoch: inv.GetEpoch(), gen: inv.GetGeneration(), vms: map[string]inventoryVM{}}
	for _, v := range inv.GetVms() {
		if v.GetUid() != "" {
			n.vms[v.GetUid()] = invVM(v)
		}
	}
	// Any full inventory is complete: deltas are judged against it from
	// now on, even if it answers an earlier Resync than the last one sent
	// (waiting for that one could silence gap detection for good).
	d.invMu.Lock()
	gap := false
	if old := d.inv[s.node]; old != nil {
		held := slices.Clone(old.held)
		slices.SortFunc(held, func(a, b *directorv1.InventoryDelta) int { return cmp.Compare(a.GetGeneration(), b.GetGeneration()) })
		for _, h := range held {
			if h.GetEpoch() == n.epoch && h.GetGeneration() > n.gen && !n.apply(h) {
				gap = true // a later one with one missing between
				break
			}
		}
	}
	d.inv[s.node] = n
	rec := n.record(d.now())
	d.invMu.Unlock()
	s.w.inventory(rec)
	if gap {
		d.log.Info("inventory gap after a full inventory: resync", "node", s.node, "epoch", n.epoch, "generation", n.gen)
		d.resync(s, "", ResyncGap)
	}
}

// inventoryDelta applies a delta that follows the stored inventory (the
// same epoch, the next generation); any other is dropped and a Resync
// asked for, unless one is on its way.
func (d *Director) inventoryDelta(s *liveSession, delta *directorv1.InventoryDelta) {
	d.invMu.Lock()
	n := d.inv[s.node]
	if n == nil || !n.apply(delta) {
		pending := n != nil && n.resync != "" && d.now().Sub(n.resyncAt) < resyncPatience
		if pending && len(n.held) < maxHeldDeltas {
			n.held = append(n.held, delta)
		}
		d.invMu.Unlock()
		if !pending {
			d.log.Info("inventory gap: resync", "node", s.node, "epoch", delta.GetEpoch(), "generation", delta.GetGeneration())
			d.resync(s, "", ResyncGap)
		}
		return
	}
	rec := n.record(d.now())
	d.invMu.Unlock()
	s.w.inventory(rec)
}

// writeInventory stores a node's inventory; the first write of a session
// also drops its issue-13 report (the inventory supersedes it).
func (d *Director) writeInventory(ctx context.Context, node string, rec *inventoryRecord, first bool) error {
	txn := d.store.Txn().Put(preInventory+node, rec, 0)
	if first {
		txn.Delete(preReports + node)
	}
	if _, err := txn.Commit(ctx); err != nil {
		d.log.Warn("director: write inventory: retried", "node", node, "err", err)
		return err
	}
	return nil
}

// hasInventory says whether this replica has had a full inventory of
// node: its host reports are then no longer stored.
func (d *Director) hasInventory(node string) bool {
	d.invMu.Lock()
	defer d.invMu.Unlock()
	n := d.inv[node]
	return n != nil && n.epoch != ""
}

// resyncRecord is resync/<node>: an admin's request for a full
// inventory, sent by the replica holding the node's session.
type resyncRecord struct {
	V  int    `json:"v"`
	ID string `json:"id"`
	At int64  `json:"at"`
	By string `json:"by,omitempty"`
}

// followResync sends a Resync to each node whose resync/<node> is
// written (through any replica) while this replica holds its session.
func (d *Director) followResync(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preResync, rev+1) {
			if ev.Status() || ev.Deleted {
				continue
			}
			rev = ev.Rev
			s := d.held(strings.TrimPrefix(ev.Key, preResync))
			if s == nil {
				continue
			}
			var r resyncRecord
			if err := json.Unmarshal(ev.Raw, &r); err != nil {
				continue
			}
			d.resync(s, r.ID, ResyncAdmin)
		}
		if ctx.Err() != nil {
			return
		}
		for ctx.Err() == nil {
			var err error
			if rev, err = d.currentRev(ctx, preResync); err == nil {
				break
			}
			sleepCtx(ctx, time.Second)
		}
	}
}

// nodeVMs are a node's VMs for display: from its inventory when it has
// one, else from its last issue-13 report; while the node is not Ready or
// not heard from since this director started, each shows as "unknown
// (last seen <phase> at <time>)".
func nodeVMs(ni *directorv1.NodeInfo, inv *inventoryRecord, rep *nodeReport) []*directorv1.NodeVM {
	stale := ni.GetState() != StateReady || ni.GetLastSeenUnixMs() == 0
	var out []*directorv1.NodeVM
	add := func(vm *directorv1.NodeVM, at time.Time) {
		vm.NodeId, vm.NodeHostname, vm.DisplayPhase, vm.ReportedAtUnixMs = ni.GetId(), ni.GetHostname(), vm.Phase, ms(at)
		if stale {
			vm.DisplayPhase = UnknownPhase(vm.Phase, at)
		}
		out = append(out, vm)
	}
	switch {
	case inv != nil:
		at := fromMS(inv.At)
		for _, v := range inv.VMs {
			add(&directorv1.NodeVM{Uid: v.UID, Name: v.Name, Phase: v.Phase, Class: v.Class,
				DirectorGeneration: v.DirectorGeneration, Generation: v.Generation, ObservedGeneration: v.ObservedGeneration,
				Cpus: v.CPUs, MemoryMib: v.MemoryMiB, Source: v.Source, Reason: v.Reason}, at)
		}
	case rep != nil:
		for _, v := range rep.vms {
			add(&directorv1.NodeVM{Uid: v.UID, Name: v.Name, Phase: v.Phase, Class: v.Class}, rep.at)
		}
	}
	return out
}

// getInventory reads inventory/<node>; nil when the node has none.
func (d *Director) getInventory(ctx context.Context, node string) (*inventoryRecord, error) {
	var r inventoryRecord
	if _, err := d.store.Get(ctx, preInventory+node, &r); err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return &r, nil
}
