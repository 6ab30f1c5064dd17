package agent

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

// The director's replica list (Registered.directors, Directors pushes) is
// stored in agent.yaml, only when it changes; when the replica holding
// the session dies, the agent is on another one within seconds.
func TestDirectorsStoredAndRotated(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	a, b := startFakeSessionsCA(t, ca), startFakeSessionsCA(t, ca)
	a.directors = []string{a.addr, b.addr, "not-an-address"}
	h := testHost(t)
	prepareAgent(t, a, h)
	startRun(t, h, RunOptions{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	a.waitSessions(t, 1)
	var cfg *Config
	waitFor(t, "directors stored", func() bool {
		c, err := loadConfig(h.Layout)
		cfg = c
		return err == nil && len(c.Directors) == 2
	})
	if !slices.Equal(cfg.Directors, []string{a.addr, b.addr}) || cfg.Director != a.addr {
		t.Errorf("agent.yaml directors %v (director %s); want %v and the enrolment's director kept", cfg.Directors, cfg.Director, []string{a.addr, b.addr})
	}
	st, err := os.Stat(ConfigFile(h.Layout))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("agent.yaml mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	// the same list again writes nothing
	a.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Directors{Directors: &directorv1.Directors{Addrs: []string{a.addr, b.addr}}}})
	// an empty list is ignored
	a.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Directors{Directors: &directorv1.Directors{}}})
	time.Sleep(200 * time.Millisecond)
	if st2, err := os.Stat(ConfigFile(h.Layout)); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("agent.yaml rewritten for an unchanged or empty list (%v)", err)
	}

	start := time.Now()
	a.kill()
	b.waitSessions(t, 1)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("on the other replica %s after the kill; want within a few seconds", took)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The backoff grows only after every address failed once in a round.
func TestRotationRounds(t *testing.T) {
	t.Parallel()
	ro := &rotation{}
	ro.set([]string{"a:1", "b:1", "c:1"})
	var got []bool
	var seen []string
	for range 6 {
		seen = append(seen, ro.current())
		got = append(got, ro.ended(false))
	}
	if want := []bool{false, false, true, false, false, true}; !slices.Equal(got, want) {
		t.Errorf("round failed %v; want %v", got, want)
	}
	if want := []string{"a:1", "b:1", "c:1", "a:1", "b:1", "c:1"}; !slices.Equal(seen, want) {
		t.Errorf("dialled %v; want %v", seen, want)
	}
	ro.ended(false)
	if ro.ended(true) || ro.failed != 0 {
		t.Errorf("a registered session does not reset the round")
	}
	// a new list keeps the position on the address dialled now
	cur := ro.current()
	ro.set([]string{"z:1", cur})
	if ro.current() != cur {
		t.Errorf("after a new list dialling %s; want %s", ro.current(), cur)
	}
}

// Leave goes to the first address that answers: the enrolment's director
// being down is no obstacle while another replica is up.
func TestLeaveOtherReplica(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	a, b := startFakeSessionsCA(t, ca), startFakeSessionsCA(t, ca)
	h := testHost(t)
	prepareAgent(t, a, h)
	c, err := loadConfig(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	c.Directors = []string{a.addr, b.addr}
	buf, err := MarshalConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ConfigFile(h.Layout), buf, 0o600); err != nil {
		t.Fatal(err)
	}
	a.kill()
	if err := Leave(context.Background(), h, false); err != nil {
		t.Fatalf("Leave with the enrolment's director down: %v", err)
	}
	b.mu.Lock()
	n := b.leaves
	b.mu.Unlock()
	if n != 1 {
		t.Errorf("the other replica got %d Leave calls; want 1", n)
	}
	if _, err := os.Stat(ConfigFile(h.Layout)); !os.IsNotExist(err) {
		t.Errorf("credentials left after Leave: %v", err)
	}
}
