package director

import (
	"testing"
	"testing/synctest"
	"time"
)

// The tracker on a fake time (synctest's bubble): Ready until 30 s of
// silence, Degraded until 90 s, then Offline; each transition reported
// once by sweep; a heartbeat brings the node back.
func TestTrackerTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTracker(time.Now, 30*time.Second, 90*time.Second)
		tr.add("n1", time.Now(), false)
		tr.seen("n1")
		start := time.Now()
		var got []transition
		for i := 0; i < 100; i++ {
			time.Sleep(time.Second)
			got = append(got, tr.sweep()...)
		}
		if len(got) != 2 || got[0].To != StateDegraded || got[1].To != StateOffline {
			t.Fatalf("transitions %+v, want Ready→Degraded, Degraded→Offline", got)
		}
		if d := got[0].Since.Sub(start); d != 30*time.Second {
			t.Errorf("Degraded since +%s, want +30s", d)
		}
		if d := got[1].Since.Sub(start); d != 90*time.Second {
			t.Errorf("Offline since +%s, want +90s", d)
		}
		l, ok := tr.get("n1")
		if !ok || l.State != StateOffline || !l.LastSeen.Equal(start) {
			t.Errorf("get = %+v %v, want Offline, last seen at the start", l, ok)
		}
		back := tr.seen("n1")
		if back == nil || back.From != StateOffline || back.To != StateReady {
			t.Errorf("seen after silence = %+v, want Offline→Ready", back)
		}
		if more := tr.sweep(); len(more) != 0 {
			t.Errorf("sweep after seen: %+v, want none", more)
		}
	})
}

// seen of a node the tracker does not follow changes nothing: a session's
// receiving goroutine may hear its node just after a revocation or a
// forget removed it, and must not bring it back Ready (nor have the
// sweep write an orphan nodestate/ for it later).
func TestTrackerSeenIgnoresUntracked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTracker(time.Now, 30*time.Second, 90*time.Second)
		tr.add("n1", time.Now(), false)
		tr.remove("n1") // revoked, or forgotten
		for _, node := range []string{"n1", "never-added"} {
			if got := tr.seen(node); got != nil {
				t.Errorf("seen(%s) = %+v, want nil", node, got)
			}
			if l, ok := tr.get(node); ok {
				t.Errorf("after seen, %s is tracked: %+v", node, l)
			}
		}
		time.Sleep(91 * time.Second)
		if got := tr.sweep(); len(got) != 0 {
			t.Errorf("sweep: %+v, want no transitions of untracked nodes", got)
		}
	})
}

// The state is computed when asked, not only as of the last sweep, and a
// node silent long enough goes straight from Ready to Offline.
func TestTrackerStateOnRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTracker(time.Now, 30*time.Second, 90*time.Second)
		tr.add("n1", time.Now(), false)
		tr.add("off", time.Now(), true)
		time.Sleep(31 * time.Second)
		if l, _ := tr.get("n1"); l.State != StateDegraded || !l.LastSeen.IsZero() {
			t.Errorf("after 31 s without a sweep: %+v, want Degraded, never heard", l)
		}
		if l, _ := tr.get("off"); l.State != StateOffline {
			t.Errorf("added offline: %s, want Offline", l.State)
		}
		time.Sleep(60 * time.Second)
		got := tr.sweep()
		if len(got) != 1 || got[0].Node != "n1" || got[0].From != StateReady || got[0].To != StateOffline {
			t.Errorf("first sweep after 91 s: %+v, want n1 Ready→Offline only", got)
		}
	})
}

func TestCheckAdminPeer(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    cred
		euid int
		ok   bool
	}{
		{"root", cred{uid: 0, ok: true}, 1000, true},
		{"the director's user", cred{uid: 1000, ok: true}, 1000, true},
		{"another user", cred{uid: 65534, ok: true}, 1000, false},
		{"another user, director as root", cred{uid: 65534, ok: true}, 0, false},
		{"unknown", cred{}, 0, false},
	} {
		err := checkAdminPeer(tc.c, tc.euid)
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkAdminPeer(%+v, %d) = %v, want ok %v", tc.name, tc.c, tc.euid, err, tc.ok)
		}
	}
}

func TestAdvertiseAddr(t *testing.T) {
	ln := fakeAddr("0.0.0.0:9443")
	for _, tc := range []struct{ in, want string }{
		{"dir.example", "dir.example:9443"},
		{"dir.example:8443", "dir.example:8443"},
		{"10.0.0.1", "10.0.0.1:9443"},
		{"[fd00::1]", "[fd00::1]:9443"},
		{"fd00::1", "[fd00::1]:9443"},
		{"[fd00::1]:7000", "[fd00::1]:7000"},
	} {
		got, err := advertiseAddr(tc.in, ln)
		if err != nil || got != tc.want {
			t.Errorf("advertiseAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"host:0", "host:99999", ":9443"} {
		if got, err := advertiseAddr(bad, ln); err == nil {
			t.Errorf("advertiseAddr(%q) = %q, want an error", bad, got)
		}
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
