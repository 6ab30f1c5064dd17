package agent

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/paths"
)

// RunOptions tune Run.
type RunOptions struct {
	// Logger receives the session's story (never a key); nil discards.
	Logger *slog.Logger
	// Now is the clock certificates are judged by: expiry and the renewal
	// point (default time.Now). Heartbeat and backoff timing is real time.
	Now func() time.Time
	// Rand draws the renewal point of each certificate and the jitter of
	// heartbeats and backoff (default: seeded from crypto/rand). Only
	// Run's goroutine uses it.
	Rand *rand.Rand
	// MinBackoff and MaxBackoff bound the wait between connection
	// attempts (defaults 1s and 120s).
	MinBackoff, MaxBackoff time.Duration
	// DialContext dials the director (default: a net.Dialer).
	DialContext DialFunc

	// control, when set, gets the session control the tasks get (tests).
	control func(sessionControl)
}

// renewRetry is the wait after a failed renewal before the next try (the
// session goes on with the current certificate meanwhile).
const renewRetry = 5 * time.Minute

// Run keeps the host's session with the director until ctx ends (then it
// says goodbye and returns nil): one connection at a time, a new
// transport for each, reconnecting with backoff. It holds the agent's
// lock (a second Run is ErrRunning) and keeps the runtime record.
//
// It returns ErrNotEnrolled without credentials, and ErrRevoked or
// ErrExpired when the director refuses the credential as such (or the
// certificate is past its NotAfter here): it writes the alert, logs once
// at ERROR, and does not dial again — not now and not when started
// again, until a new enrolment. In no case does it touch a VM.
func Run(ctx context.Context, h *host.Host, opts RunOptions) error {
	r, err := newRunner(h, opts)
	if err != nil {
		return err
	}
	lock, err := tryLock(r.l)
	if err != nil {
		return err
	}
	defer lock.Release()
	id, err := loadIdentity(r.l)
	if err != nil {
		return err
	}
	r.setIdentity(id)
	if r.rec, err = newRecorder(r.l, r.now()); err != nil {
		return err
	}
	r.record(func(rc *record) { rc.State, rc.Director, rc.NodeID = StateConnecting, id.cfg.Director, id.cfg.NodeID })
	a, err := readAlert(r.l)
	if err != nil {
		return err
	}
	if a != nil {
		r.log.Error("director credential is "+a.Kind+": not connecting (VMs untouched); enrol again", "director", a.Director, "node", a.NodeID, "at", a.At, "reason", a.Reason)
		r.record(func(rc *record) { rc.State, rc.LastError = a.Kind, a.Reason })
		return fmt.Errorf("director %s, node %s: %w at %s", a.Director, a.NodeID, a.err(), a.At.Format(time.RFC3339))
	}
	// the journal before any session: without it the agent cannot tell
	// a redelivered task from a new one, so it does not connect
	j, err := openJournal(TasksDir(r.l), r.log, r.now())
	if err != nil {
		return err
	}
	// the goroutines below end with Run, also when it ends for a refused
	// credential (ctx still alive): a revoked node runs no more tasks
	defer r.bg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.tasks = newTaskRunner(ctx, h, r.log, j, r.out, r.ctl, r.now)
	r.tasks.failInterrupted()
	if opts.control != nil {
		opts.control(r.ctl)
	}
	r.inv = newInventory(h.VMs, h.Layout, r.log)
	r.bg.Go(func() { r.tasks.run(ctx) })
	r.bg.Go(func() { r.inv.Run(ctx) })
	r.bg.Go(func() { r.forwardDeltas(ctx) })
	return r.loop(ctx)
}

// forwardDeltas puts the inventory's deltas in the outbox.
func (r *runner) forwardDeltas(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-r.inv.Deltas():
			r.out.push(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_InventoryDelta{InventoryDelta: d}})
		}
	}
}

// runner is one Run's state; only Run's goroutine uses it.
type runner struct {
	h    *host.Host
	l    paths.Layout
	log  *slog.Logger
	now  func() time.Time
	rnd  *rand.Rand
	dial DialFunc
	bo   backoff
	rec  *recorder
	view *hostView
	rep  *reporter

	id           *identity
	renewAt      time.Time // drawn once per certificate
	nextRenewTry time.Time // after a failed renewal
	recErr       bool      // a record write failed (logged once)
	revokedWhy   string    // the reason of the director's Revoked message, if one came
	rot          rotation  // the director addresses
	addr         string    // the one dialled now

	// shared with the tasks' and the inventory's goroutines
	out   *outbox
	ctl   *sessionCtl
	tasks *taskRunner
	inv   *inventory
	bg    sync.WaitGroup // the goroutines Run started
}

func newRunner(h *host.Host, opts RunOptions) (*runner, error) {
	r := &runner{h: h, l: h.Layout, log: opts.Logger, now: opts.Now, rnd: opts.Rand, dial: opts.DialContext, out: newOutbox(), ctl: newSessionCtl()}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.rnd == nil {
		var seed [16]byte
		if _, err := crand.Read(seed[:]); err != nil {
			return nil, fmt.Errorf("agent: seed: %w", err)
		}
		r.rnd = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	minB, maxB := opts.MinBackoff, opts.MaxBackoff
	if minB <= 0 {
		minB = DefaultMinBackoff
	}
	if maxB <= 0 {
		maxB = DefaultMaxBackoff
	}
	r.bo = backoff{min: minB, max: max(minB, maxB), rand: r.rnd.Float64}
	r.view = newHostView(h)
	r.rep = &reporter{view: r.view}
	if u, err := h.Info.Usage(); err == nil {
		r.rep.prev = &u
	}
	return r, nil
}

func (r *runner) setIdentity(id *identity) {
	r.id = id
	r.renewAt = enroll.RenewAt(id.leaf.NotBefore, id.leaf.NotAfter, r.rnd.Float64())
	r.nextRenewTry = time.Time{}
	if r.rec != nil {
		r.record(func(rc *record) { rc.CertNotAfter = id.leaf.NotAfter.UTC() })
	}
}

func (r *runner) record(f func(rc *record)) {
	if err := r.rec.update(f); err != nil && !r.recErr {
		r.recErr = true
		r.log.Warn("agent record not written; virt agent status may be stale", "err", err)
	}
}

func (r *runner) loop(ctx context.Context) error {
	r.record(func(rc *record) { rc.CertNotAfter = r.id.leaf.NotAfter.UTC() })
	r.rot.set(r.id.cfg.Addrs())
	if n := len(r.rot.addrs); n > 1 {
		r.rot.i = r.rnd.IntN(n) // a fleet spreads over the replicas
	}
	for {
		if ctx.Err() != nil {
			return r.stopped()
		}
		if now := r.now(); !now.Before(r.id.leaf.NotAfter) {
			return r.refused(AlertExpired, fmt.Sprintf("certificate serial %s expired at %s (by this host's clock)", serialOf(r.id.leaf), r.id.leaf.NotAfter.UTC().Format(time.RFC3339)))
		}
		r.addr = r.rot.current()
		r.record(func(rc *record) { rc.State, rc.Director, rc.NextRetry = StateConnecting, r.addr, time.Time{} })
		end := r.session(ctx)
		switch {
		case ctx.Err() != nil:
			return r.stopped()
		case end.refusal != "":
			return r.refused(end.refusal, end.reason)
		case end.renewed:
			r.bo.reset()
			continue
		case end.restart:
			r.rot.ended(true)
			r.bo.reset()
			continue
		}
		roundFailed := r.rot.ended(end.registered)
		if end.registered {
			r.bo.reset()
		}
		var wait time.Duration
		if end.registered || roundFailed {
			wait = r.bo.next()
		} else {
			// another address is left in this round: the backoff grows
			// only once all have failed
			wait = jitter(r.bo.min, backoffJitter, r.rnd.Float64())
		}
		wait = max(wait, min(end.retryAfter, r.bo.max))
		if r.ctl.fast.Load() {
			// a task waits for a session over a changed network: every
			// second, no backoff growth
			r.bo.reset()
			wait = time.Second
		}
		next := time.Now().Add(wait)
		msg := end.err.Error()
		r.record(func(rc *record) { rc.State, rc.LastError, rc.NextRetry = StateBackoff, msg, next.UTC() })
		r.log.Warn("director session ended; reconnecting", "director", r.addr, "next", r.rot.current(), "err", end.err, "in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return r.stopped()
		case <-t.C:
		}
	}
}

func (r *runner) stopped() error {
	r.record(func(rc *record) { rc.State, rc.NextRetry = StateStopped, time.Time{} })
	r.log.Info("agent stopped", "director", r.addr)
	return nil
}

// refused ends Run for a dead credential: alert, one ERROR, the error.
func (r *runner) refused(kind, reason string) error {
	a := &alert{Kind: kind, At: r.now().UTC(), Director: r.id.cfg.Director, NodeID: r.id.cfg.NodeID, Serial: serialOf(r.id.leaf), Reason: reason}
	if err := writeAlert(r.l, a); err != nil {
		r.log.Warn("alert not written", "err", err)
	}
	r.record(func(rc *record) { rc.State, rc.LastError, rc.NextRetry = kind, reason, time.Time{} })
	r.log.Error("director credential is "+kind+": the agent stops and will not reconnect; VMs are untouched; enrol again",
		"director", a.Director, "node", a.NodeID, "serial", a.Serial, "reason", reason)
	return fmt.Errorf("director %s, node %s: %w: %s", a.Director, a.NodeID, a.err(), reason)
}
