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
