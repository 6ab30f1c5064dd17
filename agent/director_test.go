package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
)

// These tests run the agent against a real director (directortest: TLS
// 1.3 on loopback, real etcd).

func enrolHost(t *testing.T, d *directortest.Harness, h *host.Host) *Status {
	t.Helper()
	st, err := Enroll(context.Background(), h, d.Token(t, nil), EnrollOptions{Logger: testLog(t)})
	if err != nil {
		t.Fatalf("Enroll: %v", err)
	}
	return st
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func currentSerial(t *testing.T, h *host.Host) string {
	t.Helper()
	id, err := loadIdentity(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	return serialOf(id.leaf)
}

func TestEnrollDirector(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t)
	h := testHost(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	join := d.Token(t, nil)
	st, err := Enroll(context.Background(), h, join, EnrollOptions{Logger: log})
	if err != nil {
		t.Fatalf("Enroll: %v", err)
	}
	// what the agent logged has neither the token's secret nor the key
	keyPEM, _ := os.ReadFile(IdentityFile(h.Layout))
	blk, _ := pem.Decode(keyPEM)
	if strings.Contains(logs.String(), join.Secret()) || strings.Contains(logs.String(), "PRIVATE KEY") ||
		strings.Contains(logs.String(), base64.StdEncoding.EncodeToString(blk.Bytes)[:40]) {
		t.Errorf("the enrolment's log holds a secret:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), join.ID()) {
		t.Errorf("the log does not name the token's id %s:\n%s", join.ID(), logs.String())
	}
	if !st.Enrolled || st.Pin != d.Pin || st.Director != d.Addr || !enroll.ValidNodeID(st.NodeID) {
		t.Fatalf("status %+v; want enrolled with %s, pin %s", st, d.Addr, d.Pin)
	}
	n := d.Node(t, st.NodeID)
	if n.GetNode().GetHostname() == "" || n.GetNode().GetCertSerial() != st.CertSerial || n.GetHost().GetAgentVersion() == "" {
		t.Errorf("the director's node %v; want the host's facts and the certificate %s", n.GetNode(), st.CertSerial)
	}
	caps := map[string]bool{}
	for _, c := range n.GetCapabilities() {
		caps[c.GetName()] = c.GetAvailable()
	}
	if len(caps) != len(capabilityChecks) || caps["kvm"] {
		t.Errorf("capabilities %v: want all %d, kvm unavailable on the PVM fixture", caps, len(capabilityChecks))
	}
	fs, err := ConfigCheck(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Status != FindingPass {
			t.Errorf("config-check after enrolment: %s %s: %s", f.ID, f.Status, f.Detail)
		}
	}
	if got := d.D.Stats().EnrollOK; got != 1 {
		t.Errorf("EnrollOK = %d; want 1", got)
	}
}

// A wrong pin aborts in the handshake: the director never sees the
// request, so the token stays unused.
func TestEnrollWrongPinDirector(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t)
	h := testHost(t)
	j := d.Token(t, nil)
	bad, err := enroll.NewJoin(j.ID(), j.Secret(), j.Addr(), "sha256:"+strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Enroll(context.Background(), h, bad, EnrollOptions{}); !errors.Is(err, enroll.ErrPinMismatch) {
		t.Fatalf("Enroll with a wrong pin: %v; want ErrPinMismatch", err)
	}
	if n := d.D.Stats().EnrollAttempts; n != 0 {
		t.Errorf("EnrollAttempts = %d; want 0 (the token must not reach the director)", n)
	}
	// the same token then works with the right pin: it was never spent
	if _, err := Enroll(context.Background(), h, j, EnrollOptions{}); err != nil {
		t.Errorf("Enroll with the right pin after: %v", err)
	}
}

func TestEnrollNoPinDirector(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t)
	h := testHost(t)
	j := d.Token(t, nil)
	unpinned, err := enroll.NewJoin(j.ID(), j.Secret(), j.Addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Enroll(context.Background(), h, unpinned, EnrollOptions{}); !errors.Is(err, enroll.ErrNoPin) {
		t.Fatalf("Enroll without a pin: %v; want ErrNoPin", err)
	}
	if n := d.D.Stats().EnrollAttempts; n != 0 {
		t.Errorf("EnrollAttempts = %d; want 0", n)
	}
	st, err := Enroll(context.Background(), h, unpinned, EnrollOptions{UnsafeSkipPin: true})
	if err != nil {
		t.Fatalf("Enroll with UnsafeSkipPin: %v", err)
	}
	if st.Pin != d.Pin {
		t.Errorf("recorded pin %s; want the director's %s", st.Pin, d.Pin)
	}
}

// A reply lost after the director signed: the key is still pending, and
// the retry with the same token gets the same certificate.
func TestEnrollRetryAfterLostReply(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t)
	h := testHost(t)
	j := d.Token(t, nil)
	first, err := Enroll(context.Background(), h, j, EnrollOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// as if the reply never came: the pending key is all there is
	b, err := os.ReadFile(IdentityFile(h.Layout))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if err := os.WriteFile(PendingKeyFile(h.Layout), pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{IdentityFile(h.Layout), CAFile(h.Layout), ConfigFile(h.Layout)} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Enroll(context.Background(), h, j, EnrollOptions{})
	if err != nil {
		t.Fatalf("retry with the pending key: %v", err)
	}
	if again.CertSerial != first.CertSerial || again.NodeID != first.NodeID {
		t.Errorf("retry got serial %s node %s; want the same %s %s", again.CertSerial, again.NodeID, first.CertSerial, first.NodeID)
	}
	// another key with the spent token is a replay
	if err := os.Remove(IdentityFile(h.Layout)); err != nil {
		t.Fatal(err)
	}
	if _, err := Enroll(context.Background(), h, j, EnrollOptions{}); !errors.Is(err, ErrTokenRefused) {
		t.Errorf("another key with the used token: %v; want ErrTokenRefused", err)
	}
}

type runResult struct {
	err error
	at  time.Time
}

func startRun(t *testing.T, h *host.Host, opts RunOptions) (context.CancelFunc, <-chan runResult) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLog(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runResult, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		err := Run(ctx, h, opts)
		done <- runResult{err, time.Now()}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return 20 s after its context ended")
		}
	})
	return cancel, done
}

// waitStatus polls the status files until ok.
func waitStatus(t *testing.T, h *host.Host, what string, timeout time.Duration, ok func(*Status) bool) *Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := ReadStatus(h.Layout)
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: not %s after %s: %+v (%v)", what, timeout, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func shortIntervals(o *director.Options) {
	o.HeartbeatInterval = 50 * time.Millisecond
	o.ReportInterval = 200 * time.Millisecond
}

func TestRunRegistersReady(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t, shortIntervals)
	h := testHost(t)
	st := enrolHost(t, d, h)
	cancel, done := startRun(t, h, RunOptions{})
	waitStatus(t, h, "connected with a heartbeat answered", 20*time.Second, func(s *Status) bool {
		return s.Running && s.State == StateConnected && !s.LastHeartbeatAck.IsZero()
	})
	n := d.WaitNodeState(t, st.NodeID, "Ready", 10*time.Second)
	if !n.GetNode().GetConnected() {
		t.Errorf("node %v: want connected", n.GetNode())
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Node(t, st.NodeID).GetLastReport() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if rep := d.Node(t, st.NodeID).GetLastReport(); rep == nil || rep.GetAcceleration() == "" || rep.GetVmCounts() == nil || rep.GetWorstCheck() == nil {
		t.Errorf("host report %v: want the acceleration verdict, VM counts and the worst check", rep)
	}
	if _, err := Enroll(context.Background(), h, d.Token(t, nil), EnrollOptions{}); !errors.Is(err, ErrRunning) {
		t.Errorf("Enroll while the agent runs: %v; want ErrRunning", err)
	}
	if err := Run(context.Background(), h, RunOptions{}); !errors.Is(err, ErrRunning) {
		t.Errorf("a second Run: %v; want ErrRunning", err)
	}
	cancel()
	select {
	case r := <-done:
		if r.err != nil {
			t.Errorf("Run after its context ended: %v; want nil", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	if s, _ := ReadStatus(h.Layout); s.Running || s.State != StateStopped {
		t.Errorf("after stop: running %v state %q; want stopped", s.Running, s.State)
	}
}

// Revocation ends the live session at once: Run returns ErrRevoked within
// about a second, writes the alert and dials no more — nor does a Run
// started again.
func TestRunRevoked(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t, shortIntervals)
	h := testHost(t)
	st := enrolHost(t, d, h)
	var dials atomic.Int64
	_, done := startRun(t, h, RunOptions{DialContext: countingDial(&dials), MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	waitStatus(t, h, "connected", 20*time.Second, func(s *Status) bool { return s.State == StateConnected })
	revokedAt := time.Now()
	if _, err := d.Admin.RevokeNode(context.Background(), connect.NewRequest(&directorv1.RevokeNodeRequest{Id: st.NodeID, Reason: "test"})); err != nil {
		t.Fatal(err)
	}
	var r runResult
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after the node was revoked")
	}
	if !errors.Is(r.err, ErrRevoked) {
		t.Fatalf("Run: %v; want ErrRevoked", r.err)
	}
	if took := r.at.Sub(revokedAt); took > 1500*time.Millisecond {
		t.Errorf("Run returned %s after the revocation; want about 1 s at most", took)
	}
	n := dials.Load()
	time.Sleep(300 * time.Millisecond) // several backoffs' worth
	if err := Run(context.Background(), h, RunOptions{DialContext: countingDial(&dials)}); !errors.Is(err, ErrRevoked) {
		t.Errorf("Run again: %v; want ErrRevoked from the alert", err)
	}
	if got := dials.Load(); got != n {
		t.Errorf("dials after the revocation: %d more; want none", got-n)
	}
	s, err := ReadStatus(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if s.Alert != AlertRevoked || s.State != StateRevoked || !strings.HasPrefix(s.Line(), "Director: REVOKED at ") {
		t.Errorf("status after revocation: alert %q state %q line %q", s.Alert, s.State, s.Line())
	}
	// a revoked host may enrol again: that clears the alert
	if _, err := Enroll(context.Background(), h, d.Token(t, nil), EnrollOptions{}); err != nil {
		t.Fatalf("enrol again after revocation: %v", err)
	}
	if s, _ := ReadStatus(h.Layout); s.Alert != "" {
		t.Errorf("alert %q after a new enrolment; want none", s.Alert)
	}
}

// At its renewal point (drawn once per certificate, here by a seeded
// Rand) the agent gets a new certificate for a new key over the current
// connection, then reconnects with it.
func TestRunRenewal(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t, shortIntervals)
	h := testHost(t)
	enrolHost(t, d, h)
	id, err := loadIdentity(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	oldSerial := serialOf(id.leaf)
	// the runner's first draw is the renewal point
	r0 := rand.New(rand.NewPCG(13, 17)).Float64()
	renewAt := enroll.RenewAt(id.leaf.NotBefore, id.leaf.NotAfter, r0)
	frac := float64(renewAt.Sub(id.leaf.NotBefore)) / float64(id.leaf.NotAfter.Sub(id.leaf.NotBefore))
	if frac < enroll.RenewFrom || frac > enroll.RenewTo {
		t.Fatalf("renewal at %.2f of the life; want within %.1f-%.1f", frac, enroll.RenewFrom, enroll.RenewTo)
	}
	var dials atomic.Int64
	startRun(t, h, RunOptions{Now: d.Clock.Now, Rand: rand.New(rand.NewPCG(13, 17)), DialContext: countingDial(&dials)})
	waitStatus(t, h, "connected", 20*time.Second, func(s *Status) bool { return s.State == StateConnected })

	d.Clock.Advance(renewAt.Add(-time.Hour).Sub(d.Clock.Now()))
	time.Sleep(400 * time.Millisecond) // 8 heartbeats: too early for any of them to renew
	if got := currentSerial(t, h); got != oldSerial {
		t.Fatalf("renewed at %.3f of the life, before its point %.3f", float64(d.Clock.Now().Sub(id.leaf.NotBefore))/float64(id.leaf.NotAfter.Sub(id.leaf.NotBefore)), frac)
	}
	dialsBefore := dials.Load()
	d.Clock.Advance(2 * time.Hour)
	st := waitStatus(t, h, "a new certificate", 20*time.Second, func(s *Status) bool { return s.CertSerial != oldSerial })
	if !st.CertNotAfter.After(id.leaf.NotAfter) {
		t.Errorf("renewed certificate valid until %v; want later than the old %v", st.CertNotAfter, id.leaf.NotAfter)
	}
	// the director sees the node registered with the new certificate: a
	// new session (audited with the new serial) on a new connection; the
	// old session says goodbye first, so "connected" alone could still be
	// the old one
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := d.Node(t, st.NodeID).GetNode()
		opened := false
		for _, e := range d.Audit(t) {
			if e.GetKind() == "session.open" && e.GetSerial() == st.CertSerial {
				opened = true
			}
		}
		if opened && n.GetCertSerial() == st.CertSerial && n.GetConnected() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the director's node: serial %s connected %v, a session with the new serial opened %v; want the renewed %s, connected", n.GetCertSerial(), n.GetConnected(), opened, st.CertSerial)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitStatus(t, h, "connected", 10*time.Second, func(s *Status) bool { return s.State == StateConnected })
	newID, err := loadIdentity(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if newID.key.Equal(id.key) {
		t.Errorf("the renewed certificate is for the old key; want a new key")
	}
	if dials.Load() <= dialsBefore {
		t.Errorf("no new connection after the renewal; want a reconnect with the new certificate")
	}
}

// Leave revokes the node at the director and deletes the credentials.
func TestLeaveDirector(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t)
	h := testHost(t)
	st := enrolHost(t, d, h)
	if err := Leave(context.Background(), h, false); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if got := d.Node(t, st.NodeID).GetNode().GetState(); got != "Revoked" {
		t.Errorf("the director's node is %s after Leave; want Revoked", got)
	}
	if s, err := ReadStatus(h.Layout); err != nil || s.Enrolled {
		t.Errorf("status after Leave: %+v %v; want not enrolled", s, err)
	}
	if err := Leave(context.Background(), h, false); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("Leave again: %v; want ErrNotEnrolled", err)
	}
}

// A stopping agent says Goodbye: the director closes the session with the
// agent's reason, not as a lost connection.
func TestRunSaysGoodbye(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t, shortIntervals)
	h := testHost(t)
	st := enrolHost(t, d, h)
	cancel, done := startRun(t, h, RunOptions{})
	waitStatus(t, h, "connected", 20*time.Second, func(s *Status) bool { return s.State == StateConnected })
	d.WaitNodeState(t, st.NodeID, "Ready", 10*time.Second)
	cancel()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Run: %v; want nil after its context ended", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var closes []string
		for _, e := range d.Audit(t) {
			if e.GetKind() == "session.close" && e.GetNodeId() == st.NodeID {
				closes = append(closes, e.GetDetail())
			}
		}
		if len(closes) > 0 {
			if !strings.Contains(closes[len(closes)-1], "agent stopping") {
				t.Errorf("session closed with %q; want the agent's goodbye (agent stopping)", closes[len(closes)-1])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session.close audited 5 s after the agent stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
