package director_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
)

func fastSweep(o *director.Options) { o.SweepEvery = 10 * time.Millisecond }

func vmPhases(n *directorv1.GetNodeResponse) map[string]string {
	out := map[string]string{}
	for _, v := range n.GetVms() {
		out[v.GetName()] = v.GetDisplayPhase()
	}
	return out
}

// Silence makes a node Degraded at 30 s and Offline at 90 s on the
// director's clock; its VMs then show as unknown with their last phase,
// never as stopped; a heartbeat makes it Ready again.
func TestLivenessDegradedOffline(t *testing.T) {
	h := directortest.Start(t, fastSweep)
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, node)
	s.report(&directorv1.VMSummary{Uid: "u1", Name: "web", Phase: "Running", Class: "managed"},
		&directorv1.VMSummary{Uid: "u2", Name: "db", Phase: "Stopped", Class: "managed"})
	if err := s.heartbeat(1); err != nil { // the report is handled before the ack
		t.Fatal(err)
	}
	reportedAt := h.Clock.Now().UTC().Format(time.RFC3339)
	n := h.WaitNodeState(t, node, director.StateReady, time.Second)
	if got := vmPhases(n); got["web"] != "Running" || got["db"] != "Stopped" {
		t.Errorf("Ready node's VMs %v, want web Running, db Stopped", got)
	}

	h.Clock.Advance(29 * time.Second)
	h.WaitNodeState(t, node, director.StateReady, time.Second)
	h.Clock.Advance(time.Second)
	n = h.WaitNodeState(t, node, director.StateDegraded, time.Second)
	want := map[string]string{
		"web": "unknown (last seen Running at " + reportedAt + ")",
		"db":  "unknown (last seen Stopped at " + reportedAt + ")",
	}
	if got := vmPhases(n); got["web"] != want["web"] || got["db"] != want["db"] {
		t.Errorf("Degraded node's VMs %v, want %v", got, want)
	}
	if n.GetNode().GetLastSeenUnixMs() == 0 {
		t.Errorf("last seen is 0, want the heartbeat's time")
	}

	h.Clock.Advance(59 * time.Second)
	h.WaitNodeState(t, node, director.StateDegraded, time.Second)
	h.Clock.Advance(time.Second)
	n = h.WaitNodeState(t, node, director.StateOffline, time.Second)
	if got := vmPhases(n); got["web"] != want["web"] || len(got) != 2 {
		t.Errorf("Offline node's VMs %v, want %v", got, want)
	}
	for _, v := range n.GetVms() {
		if strings.Contains(strings.ToLower(v.GetDisplayPhase()), "stopped") && v.GetPhase() != "Stopped" {
			t.Errorf("VM %s shows %q", v.GetName(), v.GetDisplayPhase())
		}
	}

	if err := s.heartbeat(2); err != nil {
		t.Fatal(err)
	}
	n = h.WaitNodeState(t, node, director.StateReady, time.Second)
	if got := vmPhases(n); got["web"] != "Running" {
		t.Errorf("back to Ready: VMs %v, want web Running", got)
	}
}

// The director restarted on its data dir: nodes, tokens and the last VM
// lists survive; a node starts as last seen at the restart and goes
// Offline unless it comes back; one Offline before stays Offline.
func TestRestartKeepsState(t *testing.T) {
	h := directortest.Start(t, fastSweep)
	ctx := context.Background()
	node, cert := h.Enroll(t, nil)
	quiet, _ := h.Enroll(t, nil)
	spare := h.Token(t, &directorv1.CreateTokenRequest{MaxUses: 3, NodeName: "later"})
	agent, hc := h.AgentClient(cert)
	s, _ := openSession(t, agent, node)
	s.report(&directorv1.VMSummary{Uid: "u1", Name: "web", Phase: "Running"})
	if err := s.heartbeat(1); err != nil {
		t.Fatal(err)
	}
	reportedAt := h.Clock.Now().UTC().Format(time.RFC3339)
	s.cancel()
	hc.CloseIdleConnections()
	// quiet went silent long ago: Offline, and written so (sweep).
	h.Clock.Advance(60 * time.Second)
	if err := func() error { // keep node alive
		agent, hc := h.AgentClient(cert)
		defer hc.CloseIdleConnections()
		s, _ := openSession(t, agent, node)
		defer s.cancel()
		return s.heartbeat(2)
	}(); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(40 * time.Second)
	h.WaitNodeState(t, quiet, director.StateOffline, time.Second)
	h.WaitNodeState(t, node, director.StateDegraded, time.Second)
	time.Sleep(100 * time.Millisecond) // a few sweeps write the transitions

	oldPin := h.Pin
	h.Restart(t)
	if h.Pin != oldPin {
		t.Errorf("pin after restart %s, want the same %s", h.Pin, oldPin)
	}
	n := h.Node(t, node)
	if n.GetNode().GetState() != director.StateReady || n.GetNode().GetLastSeenUnixMs() != 0 {
		t.Errorf("after restart: node %s last seen %d, want Ready (as of the restart), last seen 0", n.GetNode().GetState(), n.GetNode().GetLastSeenUnixMs())
	}
	// Ready as of the restart, but not heard from since: its VMs are
	// unknown, with the last report kept.
	if got, want := vmPhases(n)["web"], "unknown (last seen Running at "+reportedAt+")"; got != want {
		t.Errorf("after restart, before the node is heard from: web %q, want %q", got, want)
	}
	if got := h.Node(t, quiet).GetNode().GetState(); got != director.StateOffline {
		t.Errorf("after restart: the node Offline before is %s, want Offline", got)
	}
	toks, err := h.Admin.ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tk := range toks.Msg.GetTokens() {
		if tk.GetId() == spare.ID() {
			found = tk.GetState() == "active" && tk.GetMaxUses() == 3 && tk.GetNodeName() == "later"
		}
	}
	if !found || len(toks.Msg.GetTokens()) != 3 {
		t.Errorf("after restart: tokens %v, want 3 with %s active, 3 uses, node later", toks.Msg.GetTokens(), spare.ID())
	}
	// The old certificate works with the new director; the token too.
	agent, hc = h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, _ = openSession(t, agent, node)
	if err := s.heartbeat(3); err != nil {
		t.Fatal(err)
	}
	if got := vmPhases(h.Node(t, node))["web"]; got != "Running" {
		t.Errorf("after restart, heard from again: web %q, want Running", got)
	}
	if _, err := h.EnrollWith(ctx, spare, newKey(t), "later"); err != nil {
		t.Errorf("enrol with a token made before the restart: %v", err)
	}
	h.Clock.Advance(91 * time.Second)
	n = h.WaitNodeState(t, node, director.StateOffline, time.Second)
	if got := vmPhases(n)["web"]; !strings.HasPrefix(got, "unknown (last seen Running at ") {
		t.Errorf("offline after restart: web %q, want unknown (last seen Running at …)", got)
	}
}
