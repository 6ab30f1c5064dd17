package director

import (
	"context"
	"testing"
	"time"
)

// whileLeader runs the singleton loop only while this replica leads: it
// starts at each win and its ctx ends at each loss.
func TestWhileLeader(t *testing.T) {
	d := &Director{}
	d.haInit()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 4)
	stopped := make(chan struct{}, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.whileLeader(ctx, func(lctx context.Context) {
			started <- struct{}{}
			<-lctx.Done()
			stopped <- struct{}{}
		})
	}()
	expect := func(ch chan struct{}, what string, want bool) {
		t.Helper()
		select {
		case <-ch:
			if !want {
				t.Fatalf("%s, want not", what)
			}
		case <-time.After(200 * time.Millisecond):
			if want {
				t.Fatalf("not %s within 200 ms", what)
			}
		}
	}
	expect(started, "started while not leading", false)
	d.setLeader(true)
	expect(started, "started on winning", true)
	d.setLeader(false)
	expect(stopped, "stopped on losing", true)
	expect(started, "started again while not leading", false)
	d.setLeader(true)
	expect(started, "started on winning again", true)
	cancel()
	expect(stopped, "stopped at close", true)
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("whileLeader did not return after its ctx ended")
	}
}
