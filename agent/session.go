package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/enroll"
)

const (
	// registerTimeout bounds the wait for Registered after Register.
	registerTimeout = 30 * time.Second
	// defaultHeartbeat and defaultReport apply when Registered names no
	// interval; minInterval keeps a director's tiny one from spinning us.
	defaultHeartbeat = 10 * time.Second
	defaultReport    = 60 * time.Second
	minInterval      = 10 * time.Millisecond
	// silentBeats heartbeats without any answer (plus silenceGrace) end
	// a session the HTTP/2 pings kept up: a director that takes the
	// stream but answers nothing.
	silentBeats  = 3
	silenceGrace = 10 * time.Second
	// renewTimeout bounds one RenewCertificate call.
	renewTimeout = 30 * time.Second
)

// sessionEnd says how a session ended and what Run does next.
type sessionEnd struct {
	registered bool   // it got as far as Registered: the backoff restarts
	renewed    bool   // a new certificate: reconnect at once
	refusal    string // AlertRevoked or AlertExpired: stop for good
	reason     string // the refusal's reason
	err        error  // anything else: back off and reconnect
	retryAfter time.Duration
	restart    bool // a task asked for a new session (sessionControl.Restart)
}

type received struct {
	msg *directorv1.SessionResponse
	err error
}

// session runs one connection: Register, then heartbeats, reports and
// renewal until it ends.
func (r *runner) session(ctx context.Context) sessionEnd {
	id := r.id
	defer r.ctl.down()
	dialedAt := time.Now()
	var localAddr atomic.Value // of the connection this session dialled
	dial := r.dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	client, tr := newClient(id.mtlsConfig(r.now, hostOf(r.addr)), func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			localAddr.Store(c.LocalAddr().String())
		}
		return c, err
	})
	defer tr.CloseIdleConnections()
	ac := directorv1connect.NewAgentServiceClient(client, baseURL(r.addr), clientOptions()...)
	facts, caps := r.view.facts(ctx)
	kinds := taskKinds(caps, os.Geteuid())
	r.tasks.setKinds(kinds)

	// The stream outlives ctx by a moment, so that a stopping agent's
	// Goodbye reaches the director (a stream on ctx itself is aborted
	// before it can be sent); it ends at the latest goodbyeGrace later.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(goodbyeGrace, cancel) })
	defer stopGrace()
	stream := ac.Session(sctx)
	recv := make(chan received, 1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		_ = stream.CloseResponse()
	}()
	err := stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{
		NodeId: id.cfg.NodeID, Host: facts, Capabilities: caps, TaskKinds: kinds,
	}}})
	wg.Go(func() {
		for {
			m, err := stream.Receive()
			select {
			case recv <- received{m, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
	if err != nil {
		return r.ended(false, sendError(sctx, err, recv))
	}

	// Registered first; a Revoked before it is the director's word for the
	// refusal its error code will carry
	var reg *directorv1.Registered
	regT := time.NewTimer(registerTimeout)
	defer regT.Stop()
	for reg == nil {
		select {
		case <-ctx.Done():
			return sessionEnd{}
		case <-regT.C:
			return r.ended(false, fmt.Errorf("director %s: no answer to Register within %s", r.addr, registerTimeout))
		case m := <-recv:
			if m.err != nil {
				return r.ended(false, m.err)
			}
			switch msg := m.msg.GetMsg().(type) {
			case *directorv1.SessionResponse_Registered:
				reg = msg.Registered
			case *directorv1.SessionResponse_Goodbye:
				return r.goodbyeFrom(false, msg.Goodbye)
			}
		}
	}
	r.directorsFrom(reg.GetDirectors())
	hbEvery := interval(reg.GetHeartbeatIntervalMs(), defaultHeartbeat)
	repEvery := interval(reg.GetReportIntervalMs(), defaultReport)
	r.record(func(rc *record) { rc.State, rc.LastError, rc.NextRetry = StateConnected, "", time.Time{} })
	r.log.Info("director session open", "director", r.addr, "node", id.cfg.NodeID, "serial", serialOf(id.leaf),
		"heartbeat", hbEvery, "report", repEvery, "renewAt", r.renewAt.UTC().Format(time.RFC3339))

	// what a new session owes the director: the inventories queued for
	// the old one are superseded (it sends Resync now), the statuses of
	// recent tasks go again
	r.out.dropInventory()
	r.tasks.registered()
	if _, due := r.ctl.restartDue(dialedAt); due {
		r.ctl.wake()
	}
	if err := r.sendReport(ctx, stream); err != nil {
		return r.ended(true, sendError(sctx, err, recv))
	}
	firstBeat := jitter(hbEvery, heartbeatJitter, r.rnd.Float64())
	if r.ctl.waiting() {
		firstBeat = 0 // a task waits for this session's first round trip
	}
	hb := time.NewTimer(firstBeat)
	defer hb.Stop()
	rp := time.NewTimer(repEvery)
	defer rp.Stop()
	lastHeard := time.Now()
	silence := silentBeats*hbEvery + silenceGrace
	var seq uint64
	acked := false
	for {
		select {
		case <-ctx.Done():
			sayGoodbye(stream, "agent stopping")
			awaitEnd(recv)
			return sessionEnd{registered: true}
		case <-r.ctl.restart:
			if reason, due := r.ctl.restartDue(dialedAt); due {
				r.log.Info("ending the director session on a task's request", "reason", reason)
				sayGoodbye(stream, reason)
				awaitEnd(recv)
				return sessionEnd{registered: true, restart: true, err: fmt.Errorf("session ended on purpose: %s", reason)}
			}
		case <-r.out.ready:
			for _, m := range r.out.take() {
				if err := stream.Send(m); err != nil {
					return r.ended(true, sendError(sctx, err, recv))
				}
			}
		case <-hb.C:
			now := r.now()
			if !now.Before(id.leaf.NotAfter) {
				return sessionEnd{refusal: AlertExpired, reason: fmt.Sprintf("certificate serial %s expired at %s (by this host's clock)", serialOf(id.leaf), id.leaf.NotAfter.UTC().Format(time.RFC3339))}
			}
			if !now.Before(r.renewAt) && !now.Before(r.nextRenewTry) {
				err := r.renew(sctx, ac)
				if err == nil {
					r.record(func(rc *record) { rc.State = StateConnecting })
					sayGoodbye(stream, "certificate renewed")
					awaitEnd(recv)
					return sessionEnd{registered: true, renewed: true}
				}
				if end := r.ended(true, err); end.refusal != "" {
					return end
				}
				r.nextRenewTry = now.Add(renewRetry)
				r.log.Warn("certificate renewal failed; the current one serves until it is retried", "err", err, "retry", renewRetry, "notAfter", id.leaf.NotAfter)
			}
			if quiet := time.Since(lastHeard); quiet > silence {
				return r.ended(true, fmt.Errorf("director %s: no answer for %s", r.addr, quiet.Round(time.Second)))
			}
			seq++
			if err := stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Heartbeat{Heartbeat: &directorv1.Heartbeat{Seq: seq}}}); err != nil {
				return r.ended(true, sendError(sctx, err, recv))
			}
			hb.Reset(jitter(hbEvery, heartbeatJitter, r.rnd.Float64()))
		case <-rp.C:
			if err := r.sendReport(ctx, stream); err != nil {
				return r.ended(true, sendError(sctx, err, recv))
			}
			rp.Reset(repEvery)
		case m := <-recv:
			if m.err != nil {
				return r.ended(true, m.err)
			}
			lastHeard = time.Now()
			switch msg := m.msg.GetMsg().(type) {
			case *directorv1.SessionResponse_HeartbeatAck:
				at := r.now().UTC()
				r.record(func(rc *record) { rc.LastHeartbeatAck = at })
				if !acked {
					acked = true
					addr, _ := localAddr.Load().(string)
					r.ctl.up(dialedAt, addr)
				}
			case *directorv1.SessionResponse_Task:
				r.tasks.deliver(m.msg, time.Now())
			case *directorv1.SessionResponse_CancelTask:
				r.tasks.deliver(m.msg, time.Now())
			case *directorv1.SessionResponse_TaskDataAck:
				r.tasks.deliver(m.msg, time.Now())
			case *directorv1.SessionResponse_Resync:
				r.resync(ctx, msg.Resync)
			case *directorv1.SessionResponse_Directors:
				r.directorsFrom(msg.Directors.GetAddrs())
			case *directorv1.SessionResponse_Revoked:
				r.log.Warn("the director says this node is revoked", "reason", msg.Revoked.GetReason())
				r.revokedWhy = msg.Revoked.GetReason()
			case *directorv1.SessionResponse_Goodbye:
				return r.goodbyeFrom(true, msg.Goodbye)
			}
		}
	}
}

// resync answers the director's Resync with a full inventory, off the
// session loop; the deltas after it follow through the outbox.
func (r *runner) resync(ctx context.Context, rs *directorv1.Resync) {
	r.bg.Go(func() {
		inv, err := r.inv.Full(ctx, rs.GetResyncId())
		if err != nil {
			r.log.Warn("inventory for the director's resync not made", "resync", rs.GetResyncId(), "reason", rs.GetReason(), "err", err)
			return
		}
		r.out.push(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Inventory{Inventory: inv}})
	})
}

// sessionCtl is the runner's sessionControl: what tasks may ask of the
// session (apply-network's trial). Safe for concurrent use.
type sessionCtl struct {
	restart chan struct{} // cap 1: a restart was asked for
	fast    atomic.Bool   // reconnect every 1 s until a session is up

	mu        sync.Mutex
	restartAt time.Time // the last Restart: sessions dialled before it end
	reason    string
	waiters   int
	isUp      bool
	dialed    time.Time // of the session up
	addr      string
	changed   chan struct{} // closed and replaced at every change
}

func newSessionCtl() *sessionCtl {
	return &sessionCtl{restart: make(chan struct{}, 1), changed: make(chan struct{})}
}

// restartDue says whether the session dialled at dialed must end for a
// Restart (one asked for after it was dialled; a later session is the
// new one that was asked for).
func (c *sessionCtl) restartDue(dialed time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason, !c.restartAt.IsZero() && !c.restartAt.Before(dialed)
}

// Restart ends the current session with a Goodbye and dials again at
// once, then every second until a session is up.
func (c *sessionCtl) Restart(reason string) {
	c.fast.Store(true)
	c.mu.Lock()
	c.restartAt, c.reason = time.Now(), reason
	c.mu.Unlock()
	c.down()
	select {
	case c.restart <- struct{}{}:
	default: // one is asked for already
	}
}

// WaitUp blocks until a session dialled after since is up (Registered and
// one HeartbeatAck) and returns its connection's local address.
func (c *sessionCtl) WaitUp(ctx context.Context, since time.Time) (string, error) {
	c.mu.Lock()
	c.waiters++
	defer func() {
		c.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// nobody waits any more (up, or the trial is over): back to
			// the normal backoff
			c.fast.Store(false)
		}
		c.mu.Unlock()
	}()
	for {
		if c.isUp && c.dialed.After(since) {
			addr := c.addr
			c.mu.Unlock()
			return addr, nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no director session dialled after %s came up: %w", since.UTC().Format(time.RFC3339Nano), ctx.Err())
		case <-ch:
		}
		c.mu.Lock()
	}
}

func (c *sessionCtl) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiters > 0
}

func (c *sessionCtl) up(dialed time.Time, addr string) {
	c.fast.Store(false)
	c.set(true, dialed, addr)
}

func (c *sessionCtl) down() { c.set(false, time.Time{}, "") }

func (c *sessionCtl) set(up bool, dialed time.Time, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.isUp, c.dialed, c.addr = up, dialed, addr
	close(c.changed)
	c.changed = make(chan struct{})
}

type sessionStream = *connect.BidiStreamForClient[directorv1.SessionRequest, directorv1.SessionResponse]

func (r *runner) sendReport(ctx context.Context, stream sessionStream) error {
	rep := r.rep.report(ctx)
	return stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_HostReport{HostReport: rep}})
}

// sayGoodbye ends our side of the stream on purpose (best effort).
func sayGoodbye(stream sessionStream, reason string) {
	_ = stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Goodbye{Goodbye: &directorv1.Goodbye{Reason: reason}}})
	_ = stream.CloseRequest()
}

// awaitEnd waits, at most goodbyeGrace, for the director to end the
// stream after our Goodbye: cutting it at once could beat the Goodbye to
// the director.
func awaitEnd(recv <-chan received) {
	t := time.NewTimer(goodbyeGrace)
	defer t.Stop()
	for {
		select {
		case m := <-recv:
			if m.err != nil {
				return
			}
		case <-t.C:
			return
		}
	}
}

func (r *runner) goodbyeFrom(registered bool, g *directorv1.Goodbye) sessionEnd {
	return sessionEnd{registered: registered, err: fmt.Errorf("director %s said goodbye: %s", r.addr, g.GetReason()),
		retryAfter: time.Duration(g.GetReconnectAfterMs()) * time.Millisecond}
}

// ended classifies the error that ended a session: a refusal of the
// credential, or anything else (to back off from).
func (r *runner) ended(registered bool, err error) sessionEnd {
	if kind, reason := refusal(err, r.id, r.now()); kind != "" {
		if kind == AlertRevoked && r.revokedWhy != "" {
			// the Revoked message before the refusal carries the admin's words
			reason += " (" + r.revokedWhy + ")"
		}
		return sessionEnd{refusal: kind, reason: reason}
	}
	return sessionEnd{registered: registered, err: err}
}

// refusal tells a refused credential from other failures: the director's
// Unauthenticated (checked on every request), or a TLS alert by which its
// handshake refused the certificate. Expired when it says so or the
// certificate is past NotAfter by our clock; revoked otherwise.
func refusal(err error, id *identity, now time.Time) (kind, reason string) {
	if err == nil {
		return "", ""
	}
	expired := !now.Before(id.leaf.NotAfter)
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		msg := err.Error()
		var ce *connect.Error
		if errors.As(err, &ce) {
			msg = ce.Message()
		}
		low := strings.ToLower(msg)
		if strings.Contains(low, "not yet valid") {
			return "", "" // the director's clock is behind: it passes
		}
		if expired || strings.Contains(low, "expired") {
			return AlertExpired, "the director refused the certificate as expired: " + msg
		}
		return AlertRevoked, "the director refused the credential: " + msg
	}
	var ae tls.AlertError
	text := err.Error()
	switch {
	case errors.As(err, &ae) && ae == tlsAlertCertificateExpired, strings.Contains(text, "tls: expired certificate"):
		// Go's TLS server says "expired" for a certificate not yet valid
		// too: with a director whose clock is behind (or one stepped back
		// after renewing) only our own clock may end the agent for good.
		if !expired {
			return "", ""
		}
		return AlertExpired, "the director's TLS handshake refused the certificate as expired"
	case errors.As(err, &ae) && (ae == tlsAlertCertificateRevoked || ae == tlsAlertBadCertificate),
		strings.Contains(text, "remote error: tls: revoked certificate"), strings.Contains(text, "remote error: tls: bad certificate"):
		if expired {
			return AlertExpired, "the director's TLS handshake refused the certificate, expired by this host's clock"
		}
		return AlertRevoked, "the director's TLS handshake refused the certificate"
	}
	return "", ""
}

// goodbyeGrace is how long a stopping agent's session may take to say
// Goodbye before its stream is cut.
const goodbyeGrace = 2 * time.Second

// TLS alerts (RFC 8446 §6) a server sends about a client certificate.
const (
	tlsAlertBadCertificate     tls.AlertError = 42
	tlsAlertCertificateRevoked tls.AlertError = 44
	tlsAlertCertificateExpired tls.AlertError = 45
)

// sendError is what a failed Send means: on io.EOF the server ended the
// stream, and its reason is what Receive gets.
func sendError(ctx context.Context, err error, recv <-chan received) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case m := <-recv:
			if m.err != nil {
				return m.err
			}
		case <-t.C:
			return err
		case <-ctx.Done():
			return err
		}
	}
}

func interval(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	return max(time.Duration(ms)*time.Millisecond, minInterval)
}

// renew gets a new certificate for a new key over the session's
// connection and stores it; the caller then reconnects with it.
func (r *runner) renew(ctx context.Context, ac directorv1connect.AgentServiceClient) error {
	id := r.id
	key, err := enroll.NewKey()
	if err != nil {
		return err
	}
	csr, err := enroll.NewCSR(key, id.leaf.Subject.CommonName)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, renewTimeout)
	defer cancel()
	resp, err := ac.RenewCertificate(cctx, connect.NewRequest(&directorv1.RenewCertificateRequest{CsrDer: csr}))
	if err != nil {
		return fmt.Errorf("renew certificate serial %s: %w", serialOf(id.leaf), err)
	}
	leaf, chain, root, err := checkReply(resp.Msg.GetCertDer(), resp.Msg.GetCaChainDer(), key, r.now())
	if err != nil {
		return fmt.Errorf("renew certificate: %w", err)
	}
	if pin := enroll.SPKIPin(root); pin != id.cfg.Pin {
		return fmt.Errorf("renew certificate: %w: the CA has pin %s, enrolment had %s", ErrBadReply, pin, id.cfg.Pin)
	}
	if err := verifyLeaf(leaf, chain, id.root, r.now()); err != nil {
		return fmt.Errorf("renew certificate: %w: %w", ErrBadReply, err)
	}
	if node, err := enroll.NodeIDFromCert(leaf); err != nil || node != id.cfg.NodeID {
		return fmt.Errorf("renew certificate: %w: the new certificate is for node %q, not %s", ErrBadReply, node, id.cfg.NodeID)
	}
	if err := writeIdentity(r.l, key, leaf, chain); err != nil {
		return err
	}
	nid, err := loadIdentity(r.l)
	if err != nil {
		return fmt.Errorf("renew certificate: stored, but: %w", err)
	}
	r.setIdentity(nid)
	r.log.Info("certificate renewed", "old", serialOf(id.leaf), "serial", serialOf(leaf), "notAfter", leaf.NotAfter, "renewAt", r.renewAt.UTC().Format(time.RFC3339))
	return nil
}

// wake makes the session loop look at restartDue.
func (c *sessionCtl) wake() {
	select {
	case c.restart <- struct{}{}:
	default:
	}
}
