package director

import (
	"testing"
	"time"
)

// The sweep's prune forgets a source's failures once their window ended
// (the map would otherwise grow with every address that ever failed).
func TestFailLimiterPrune(t *testing.T) {
	var l failLimiter
	t0 := time.Unix(1000, 0)
	for i := 0; i < enrollFailLimit; i++ {
		l.fail("192.0.2.1", t0)
	}
	l.fail("192.0.2.2", t0.Add(30*time.Second))
	if _, refused := l.refused("192.0.2.1", t0.Add(time.Second)); !refused {
		t.Fatal("a source at the limit is not refused")
	}
	l.prune(t0.Add(enrollFailWindow))
	if _, ok := l.m["192.0.2.1"]; ok {
		t.Error("an ended window was kept by prune")
	}
	if _, ok := l.m["192.0.2.2"]; !ok {
		t.Error("a running window was dropped by prune")
	}
	if _, refused := l.refused("192.0.2.1", t0.Add(enrollFailWindow)); refused {
		t.Error("a source refused after its window ended")
	}
}
