package director

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/api/directorv1"
)

// TestInventoryGapAfterUnansweredResync: a Resync the agent never answers
// (it could not make the inventory; it only logs that) keeps gaps quiet
// for resyncPatience only: a gap after it asks again. Before, every gap
// of the session was dropped for good and the stored inventory stayed
// stale.
func TestInventoryGapAfterUnansweredResync(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	d := &Director{inv: map[string]*nodeInventory{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: clock}
	s := &liveSession{node: "n1", ended: make(chan struct{}), out: make(chan *directorv1.SessionResponse, 16)}
	resyncs := func() int {
		n := 0
		for {
			select {
			case m := <-s.out:
				if m.GetResync() != nil {
					n++
				}
			default:
				return n
			}
		}
	}
	d.resync(s, "", ResyncRegister)
	if got := resyncs(); got != 1 {
		t.Fatalf("register: got %d Resyncs; want 1", got)
	}
	delta := func(gen uint64) *directorv1.InventoryDelta {
		return &directorv1.InventoryDelta{Epoch: "e1", Generation: gen}
	}
	advance(time.Second)
	d.inventoryDelta(s, delta(7))
	if got := resyncs(); got != 0 {
		t.Errorf("gap while the Resync is fresh: got %d Resyncs; want 0 (one is on its way)", got)
	}
	advance(resyncPatience)
	d.inventoryDelta(s, delta(8))
	if got := resyncs(); got != 1 {
		t.Errorf("gap %s after an unanswered Resync: got %d Resyncs; want 1", resyncPatience+time.Second, got)
	}
}

// TestInventoryDeltaBeforeItsFull: the agent sends a Resync's answer from
// a goroutine of its own, so a delta that follows the Full (its next
// generation) can reach the director first. It is held while the Resync
// is on its way and applied after the Full; before, it was dropped and
// the inventory missed that change until the next one.
func TestInventoryDeltaBeforeItsFull(t *testing.T) {
	d := &Director{inv: map[string]*nodeInventory{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	s := &liveSession{node: "n1", ended: make(chan struct{}), out: make(chan *directorv1.SessionResponse, 16)}
	s.w = newSessionWriter(d, s)
	d.resync(s, "r1", ResyncRegister)
	d.inventoryDelta(s, &directorv1.InventoryDelta{Epoch: "e1", Generation: 6,
		Upserts: []*directorv1.InventoryVM{{Uid: "u2", Name: "b", Phase: "Running"}}})
	d.inventoryDelta(s, &directorv1.InventoryDelta{Epoch: "e1", Generation: 7, RemovedUids: []string{"u1"}})
	d.fullInventory(s, &directorv1.Inventory{Epoch: "e1", Generation: 5, ResyncId: "r1",
		Vms: []*directorv1.InventoryVM{{Uid: "u1", Name: "a", Phase: "Stopped"}}})
	n := d.inv["n1"]
	if n.gen != 7 {
		t.Errorf("generation after the Full: got %d; want 7 (the held deltas applied)", n.gen)
	}
	if _, ok := n.vms["u2"]; !ok {
		t.Errorf("VMs after the Full: got %v; want u2 from the delta that came first", n.vms)
	}
	if _, ok := n.vms["u1"]; ok {
		t.Errorf("VMs after the Full: got %v; want u1 removed by the second held delta", n.vms)
	}
	s.w.mu.Lock()
	rec := s.w.inv
	s.w.mu.Unlock()
	if rec == nil || rec.Generation != 7 || len(rec.VMs) != 1 || rec.VMs[0].UID != "u2" {
		t.Errorf("record to store: got %+v; want generation 7 with u2 only", rec)
	}
	for len(s.out) > 0 {
		if m := <-s.out; m.GetResync() != nil && m.GetResync().GetResyncId() != "r1" {
			t.Errorf("a Resync %v sent; want none after the Register's (nothing is missing)", m)
		}
	}
}
