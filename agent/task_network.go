package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/netcfg"
)

// A network change from the director is always a trial (issue 14): the
// HostNetwork is applied as a netcfg try, exactly as `virt net apply
// --try` does (same admission and plan), the session is ended on purpose
// (the old TCP connection proves nothing about the new routes) and dialled
// again, and only a session registered and heartbeat-acknowledged over a
// connection made after the apply confirms the try. When none comes
// before the deadline the try's watchdog (its own process: it survives
// the agent) restores the previous configuration, the agent's next dial
// goes over that, and the task fails ROLLED_BACK.

const (
	// defaultTrial is the trial of an ApplyNetwork without trial_ms; a
	// change that needs longer (STP) gets the least it needs (AtLeast).
	defaultTrial = 120 * time.Second
	// confirmMargin: the session must be back this long before the
	// deadline, so the confirm lands before the watchdog acts.
	confirmMargin = 2 * time.Second
	// watchdogGrace is how long past the deadline the agent waits for
	// the watchdog's rollback before it rolls back itself.
	watchdogGrace = 15 * time.Second
	// watchdogPoll is how often the pending record is read meanwhile.
	watchdogPoll = 200 * time.Millisecond
)

func init() {
	applyNetworkFunc = runApplyNetwork
	resumesNetwork = true // trialNetwork handles taskEnv.Resumed
}

// netOps are the network service's calls the trial makes, as method
// values of h.Net (a test gives its own).
type netOps struct {
	apply    func(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error)
	confirm  func(ctx context.Context, id string) error
	rollback func(ctx context.Context, id string) error
	pending  func() (*netcfg.Pending, error) // nil, nil: none pending
}

// pendingTry is n.pending with "none pending" as ErrNoPendingTry.
func (n netOps) pendingTry() (*netcfg.Pending, error) {
	p, err := n.pending()
	if err == nil && p == nil {
		return nil, netcfg.ErrNoPendingTry
	}
	return p, err
}

// runApplyNetwork runs an apply-network task on the host's network
// service.
func runApplyNetwork(ctx context.Context, env *taskEnv, t *directorv1.ApplyNetwork) (*directorv1.TaskResult, error) {
	n := env.Host.Net
	return trialNetwork(ctx, env, netOps{apply: n.ApplyDesired, confirm: n.ConfirmDesiredTry, rollback: n.RollbackDesiredTry, pending: n.PendingTry}, t)
}

func trialNetwork(ctx context.Context, env *taskEnv, n netOps, t *directorv1.ApplyNetwork) (*directorv1.TaskResult, error) {
	if env.Resumed != nil {
		return resumeTrial(ctx, env, n, env.Resumed)
	}
	if len(t.GetHostNetwork()) == 0 {
		return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT, Message: "apply-network: no HostNetwork",
			Fields: []*directorv1.FieldError{{Field: "host_network", Message: "a virtcon/v1 HostNetwork is required"}}}
	}
	trial := time.Duration(t.GetTrialMs()) * time.Millisecond
	switch {
	case t.GetTrialMs() < 0:
		return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT, Message: "apply-network: negative trial",
			Fields: []*directorv1.FieldError{{Field: "trial_ms", Value: fmt.Sprint(t.GetTrialMs()), Message: "must be 0 (120 s) or positive"}}}
	case trial == 0:
		trial = defaultTrial
	}
	res, p, err := n.apply(ctx, nil, netcfg.DesiredOptions{Data: t.GetHostNetwork(), Try: trial, AtLeast: true})
	if err != nil {
		var unkeepable *netcfg.UnkeepableTryError
		if p != nil && errors.As(err, &unkeepable) {
			// the try stands but can never be confirmed: undo it now
			rerr := n.rollback(context.WithoutCancel(ctx), p.ID)
			return nil, errors.Join(fmt.Errorf("apply-network: %w", err), rerr)
		}
		return nil, fmt.Errorf("apply-network: %w", err) // failureOf: invalid, try pending, ...
	}
	if p == nil {
		return nil, errors.New("apply-network: the try started no trial") // ApplyDesired with Try always has one
	}
	if err := env.Note(p.ID, p.Deadline); err != nil {
		// an agent restarted now could not tell its try: do not keep it
		rerr := n.rollback(context.WithoutCancel(ctx), p.ID)
		return nil, errors.Join(fmt.Errorf("apply-network: journal the trial: %w", err), rerr)
	}
	if res != nil && res.Lengthened != nil {
		env.Log.Info(fmt.Sprintf("trial lengthened to %s: %v", res.Lengthened.Min, res.Lengthened))
	}
	env.Log.Info(fmt.Sprintf("on trial as try %s until %s; reconnecting to the director over the new configuration", p.ID, p.Deadline.Format(time.RFC3339)))
	appliedAt := time.Now()
	env.Session.Restart("network changed")
	return awaitSession(ctx, env, n, p, appliedAt)
}

// resumeTrial picks up the trial a previous agent process began: while
// its try is still pending and its deadline ahead, any session of this
// process (all dialled after the apply) may confirm it; otherwise the task
// ends with what the host's pending record says.
func resumeTrial(ctx context.Context, env *taskEnv, n netOps, r *resumedTry) (*directorv1.TaskResult, error) {
	until := r.Deadline.Format(time.RFC3339)
	cur, err := n.pendingTry()
	switch {
	case errors.Is(err, netcfg.ErrNoPendingTry) && !time.Now().Before(r.Deadline):
		return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK,
			Message: fmt.Sprintf("the agent restarted during the trial and no session confirmed it before %s; the watchdog restored the previous configuration", until)}
	case errors.Is(err, netcfg.ErrNoPendingTry):
		return nil, fmt.Errorf("apply-network: try %s ended while the agent restarted, before its deadline %s (confirmed or rolled back on the host: see virt net show)", r.ID, until)
	case err != nil:
		return nil, fmt.Errorf("apply-network: reading the pending try %s: %w", r.ID, err)
	case cur.ID != r.ID:
		return nil, fmt.Errorf("apply-network: try %s is no longer pending: %w", r.ID, &netcfg.NotOurTryError{Want: r.ID, Pending: cur.ID})
	}
	env.Log.Info(fmt.Sprintf("the agent restarted during trial %s (until %s): waiting for a session over the new configuration", r.ID, until))
	return awaitSession(ctx, env, n, cur, time.Time{})
}

// awaitSession waits for a session dialled after since to be up before
// p's deadline - confirmMargin and then confirms try p; otherwise it
// leaves the try to its watchdog (ROLLED_BACK) or, when ctx ends first,
// rolls it back.
func awaitSession(ctx context.Context, env *taskEnv, n netOps, p *netcfg.Pending, since time.Time) (*directorv1.TaskResult, error) {
	until := p.Deadline.Format(time.RFC3339)
	wctx, cancel := context.WithDeadline(ctx, p.Deadline.Add(-confirmMargin))
	addr, err := env.Session.WaitUp(wctx, since)
	cancel()
	switch {
	case err == nil:
		cerr := n.confirm(ctx, p.ID)
		if cerr == nil {
			env.Log.Info(fmt.Sprintf("try %s confirmed: a session is up over the new configuration from %s", p.ID, addr))
			return &directorv1.TaskResult{Result: &directorv1.TaskResult_Network{Network: &directorv1.NetworkResult{TryId: p.ID, ConfirmedVia: addr}}}, nil
		}
		if !errors.Is(cerr, netcfg.ErrNotConfirmable) && !errors.Is(cerr, netcfg.ErrNoPendingTry) {
			// not kept; the watchdog rolls it back at the deadline
			return nil, fmt.Errorf("apply-network: session back from %s, but confirming try %s: %w", addr, p.ID, cerr)
		}
		env.Log.Info(fmt.Sprintf("session back from %s, but try %s could not be confirmed any more: %v", addr, p.ID, cerr))
	case ctx.Err() != nil:
		// cancelled (or the task's deadline) before the confirm: undo it
		rerr := n.rollback(context.WithoutCancel(ctx), p.ID)
		if rerr != nil && !errors.Is(rerr, netcfg.ErrNoPendingTry) {
			env.Log.Info(fmt.Sprintf("rolling back try %s: %v (its watchdog rolls it back at %s)", p.ID, rerr, until))
			return nil, errors.Join(context.Cause(ctx), rerr)
		}
		env.Log.Info(fmt.Sprintf("try %s rolled back: the task ended before the session came back", p.ID))
		return nil, context.Cause(ctx)
	}
	// No session in time: the watchdog rolls back at the deadline.
	if err := awaitRollback(ctx, env, n, p); err != nil {
		return nil, err
	}
	return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK,
		Message: fmt.Sprintf("no session over the new configuration before %s; the watchdog restored the previous one", until)}
}

// awaitRollback waits until try p is no longer pending (the watchdog
// restored the previous configuration), at most watchdogGrace past its
// deadline; then it rolls the try back itself. A rollback that failed
// (the record keeps its error) is the error returned.
func awaitRollback(ctx context.Context, env *taskEnv, n netOps, p *netcfg.Pending) error {
	giveUp := time.NewTimer(time.Until(p.Deadline.Add(watchdogGrace)))
	defer giveUp.Stop()
	tick := time.NewTicker(watchdogPoll)
	defer tick.Stop()
	for {
		cur, err := n.pendingTry()
		switch {
		case errors.Is(err, netcfg.ErrNoPendingTry):
			return nil
		case err != nil:
			env.Log.Info(fmt.Sprintf("reading the pending try: %v", err))
		case cur.ID != p.ID:
			return nil // ours is gone; another try began since
		case cur.RollbackError != "":
			return fmt.Errorf("apply-network: the watchdog's rollback of try %s failed: %s (`virt net rollback` retries)", p.ID, cur.RollbackError)
		}
		select {
		case <-ctx.Done():
			// the watchdog still acts; nothing is confirmed
			return context.Cause(ctx)
		case <-giveUp.C:
			env.Log.Info(fmt.Sprintf("try %s still pending %s after its deadline: rolling it back", p.ID, watchdogGrace))
			if err := n.rollback(context.WithoutCancel(ctx), p.ID); err != nil && !errors.Is(err, netcfg.ErrNoPendingTry) && !errors.Is(err, netcfg.ErrNotOurTry) {
				return fmt.Errorf("apply-network: try %s not rolled back by its watchdog, and: %w", p.ID, err)
			}
			return nil
		case <-tick.C:
		}
	}
}
