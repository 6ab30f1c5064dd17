package director_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
)

// TestHAResyncAllThroughOtherReplica: `node resync --all` asked of a
// replica that holds no session still reaches every connected node (its
// session held by the other replica). Before, "all" was the sessions of
// the replica asked: through B it named no node and A's agent got no
// Resync.
func TestHAResyncAllThroughOtherReplica(t *testing.T) {
	a, b := replicaPair(t)
	e := enrolled(t, a)
	s := haConnect(t, a, e, allKinds...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.Admin.ResyncNode(ctx, connect.NewRequest(&directorv1.ResyncNodeRequest{All: true}))
	if err != nil {
		t.Fatalf("ResyncNode all through B: %v", err)
	}
	if got := resp.Msg.GetNodes(); !slices.Contains(got, e.NodeID) {
		t.Fatalf("ResyncNode all through B: got nodes %q; want %s (held by A)", got, e.NodeID)
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-s.in:
			if !ok {
				t.Fatal("the session ended")
			}
			if m.GetResync().GetReason() == director.ResyncAdmin {
				return
			}
		case <-timeout:
			t.Fatal("A's session got no admin Resync within 5 s")
		}
	}
}
