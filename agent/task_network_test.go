package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/netcfg"
)

// fakeTrialNet is the network service of a trial: one try, whose
// watchdog "rolls back" at its deadline unless confirmed.
type fakeTrialNet struct {
	mu         *sync.Mutex // set by the test
	applyErr   error
	confirmErr error
	deadline   time.Duration // from the apply
	pend       *netcfg.Pending
	opts       netcfg.DesiredOptions
	confirmed  []string
	rolledBack []string
	watchdog   bool // the watchdog removes the record at the deadline
}

func (f *fakeTrialNet) ops() netOps {
	return netOps{
		apply: func(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.opts = opts
			if f.applyErr != nil {
				return nil, nil, f.applyErr
			}
			now := time.Now()
			f.pend = &netcfg.Pending{ID: "0123456789abcdef", Started: now, Deadline: now.Add(f.deadline)}
			return &netcfg.Result{Changed: true}, f.pend, nil
		},
		confirm: func(ctx context.Context, id string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.confirmErr != nil {
				return f.confirmErr
			}
			f.confirmed = append(f.confirmed, id)
			f.pend = nil
			return nil
		},
		rollback: func(ctx context.Context, id string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.rolledBack = append(f.rolledBack, id)
			f.pend = nil
			return nil
		},
		pending: func() (*netcfg.Pending, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.pend == nil || f.watchdog && !time.Now().Before(f.pend.Deadline) {
				f.pend = nil
				return nil, nil // as netcfg.Service.PendingTry says "none"
			}
			p := *f.pend
			return &p, nil
		},
	}
}

// fakeSession comes back up after upAfter (never when negative).
type fakeSession struct {
	upAfter  time.Duration
	mu       sync.Mutex
	restarts []string
	since    time.Time
}

func (s *fakeSession) Restart(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restarts = append(s.restarts, reason)
}

func (s *fakeSession) WaitUp(ctx context.Context, since time.Time) (string, error) {
	s.mu.Lock()
	s.since = since
	s.mu.Unlock()
	if s.upAfter < 0 {
		<-ctx.Done()
		return "", ctx.Err()
	}
	select {
	case <-time.After(s.upAfter):
		return "10.77.0.2:40000", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

type noted struct {
	id string
	at time.Time
}

func trialEnv(sess sessionControl, notes *[]noted, noteErr error) *taskEnv {
	return &taskEnv{ID: "t1", Log: slog.New(slog.DiscardHandler), Progress: func(int64, int64, string) {},
		Note: func(id string, at time.Time) error {
			*notes = append(*notes, noted{id, at})
			return noteErr
		},
		Session: sess}
}

func TestApplyNetworkTrial(t *testing.T) {
	const try = "0123456789abcdef"
	doc := []byte("apiVersion: virtcon/v1\nkind: HostNetwork\n")
	tests := []struct {
		name       string
		msg        *directorv1.ApplyNetwork
		net        fakeTrialNet
		upAfter    time.Duration
		cancelAt   time.Duration // cancel the task this long in (0: never)
		noteErr    error
		wantReason directorv1.TaskFailureReason // 0: no taskFailure
		wantOK     bool
		wantErr    error // errors.Is the returned error
		confirmed  bool
		rolledBack bool
		wantTrial  time.Duration
		resumed    *resumedTry // a previous process's trial
		preset     *netcfg.Pending
	}{
		{name: "session back: confirmed", msg: &directorv1.ApplyNetwork{HostNetwork: doc}, net: fakeTrialNet{deadline: time.Minute},
			upAfter: 50 * time.Millisecond, wantOK: true, confirmed: true, wantTrial: defaultTrial},
		{name: "no session: the watchdog rolls back", msg: &directorv1.ApplyNetwork{HostNetwork: doc, TrialMs: 10_000},
			net: fakeTrialNet{deadline: confirmMargin + 300*time.Millisecond, watchdog: true}, upAfter: -1,
			wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK, wantTrial: 10 * time.Second},
		{name: "session too late: not confirmed", msg: &directorv1.ApplyNetwork{HostNetwork: doc},
			net: fakeTrialNet{deadline: confirmMargin + 300*time.Millisecond, watchdog: true}, upAfter: time.Second,
			wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK, wantTrial: defaultTrial},
		{name: "confirm refused past the deadline", msg: &directorv1.ApplyNetwork{HostNetwork: doc},
			net:     fakeTrialNet{deadline: confirmMargin + 300*time.Millisecond, watchdog: true, confirmErr: &netcfg.NotConfirmableError{ID: try}},
			upAfter: 10 * time.Millisecond, wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK, wantTrial: defaultTrial},
		{name: "cancelled before the confirm: rolled back", msg: &directorv1.ApplyNetwork{HostNetwork: doc}, net: fakeTrialNet{deadline: 5 * time.Second},
			upAfter: -1, cancelAt: 100 * time.Millisecond, wantErr: context.Canceled, rolledBack: true, wantTrial: defaultTrial},
		{name: "journal fails: rolled back", msg: &directorv1.ApplyNetwork{HostNetwork: doc}, net: fakeTrialNet{deadline: 5 * time.Second},
			upAfter: 10 * time.Millisecond, noteErr: errors.New("disk full"), rolledBack: true, wantTrial: defaultTrial},
		{name: "a try pending", msg: &directorv1.ApplyNetwork{HostNetwork: doc}, net: fakeTrialNet{applyErr: &netcfg.TryPendingError{}},
			wantErr: netcfg.ErrTryPending, wantTrial: defaultTrial},
		// the cases that confirm have deadlines far off: the table is made
		// before the parallel subtests run, which on a loaded CI machine
		// took over 3 s (deadline - confirmMargin) once
		{name: "resumed, ours pending: confirmed", resumed: &resumedTry{ID: try, Deadline: time.Now().Add(time.Minute)},
			preset: &netcfg.Pending{ID: try, Deadline: time.Now().Add(time.Minute)}, upAfter: 10 * time.Millisecond, wantOK: true, confirmed: true},
		{name: "resumed, ours pending, no session: watchdog", resumed: &resumedTry{ID: try, Deadline: time.Now().Add(confirmMargin + 300*time.Millisecond)},
			preset: &netcfg.Pending{ID: try, Deadline: time.Now().Add(confirmMargin + 300*time.Millisecond)}, net: fakeTrialNet{watchdog: true}, upAfter: -1,
			wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK},
		{name: "resumed, gone past its deadline", resumed: &resumedTry{ID: try, Deadline: time.Now().Add(-time.Second)},
			wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK},
		{name: "resumed, gone before its deadline", resumed: &resumedTry{ID: try, Deadline: time.Now().Add(time.Minute)}},
		{name: "resumed, another's pending", resumed: &resumedTry{ID: try, Deadline: time.Now().Add(time.Minute)},
			preset: &netcfg.Pending{ID: "ffffffffffffffff", Deadline: time.Now().Add(time.Minute)}, upAfter: 10 * time.Millisecond, wantErr: netcfg.ErrNotOurTry},
		{name: "no document", msg: &directorv1.ApplyNetwork{}, wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT},
		{name: "negative trial", msg: &directorv1.ApplyNetwork{HostNetwork: doc, TrialMs: -1}, wantReason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nv := tt.net
			n := &nv
			n.mu = new(sync.Mutex)
			n.pend = tt.preset
			sess := &fakeSession{upAfter: tt.upAfter}
			var notes []noted
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelAt > 0 {
				time.AfterFunc(tt.cancelAt, cancel)
			}
			start := time.Now()
			env := trialEnv(sess, &notes, tt.noteErr)
			env.Resumed = tt.resumed
			msg := tt.msg
			if msg == nil {
				msg = &directorv1.ApplyNetwork{} // as the runner resumes it
			}
			res, err := trialNetwork(ctx, env, n.ops(), msg)
			var tf *taskFailure
			errors.As(err, &tf)
			switch {
			case tt.wantOK:
				if err != nil || res.GetNetwork().GetTryId() != try || res.GetNetwork().GetConfirmedVia() != "10.77.0.2:40000" {
					t.Fatalf("got %v, %v; want a NetworkResult for try %s via 10.77.0.2:40000", res, err, try)
				}
			case tt.wantReason != 0:
				if tf == nil || tf.Reason != tt.wantReason {
					t.Fatalf("got %v, %v; want a %v failure", res, err, tt.wantReason)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v; want %v", err, tt.wantErr)
				}
				if errors.Is(err, netcfg.ErrTryPending) && failureOf(err).Reason != directorv1.TaskFailureReason_TASK_FAILURE_REASON_CONFLICT {
					t.Errorf("a pending try fails %v; want CONFLICT", failureOf(err).Reason)
				}
			default:
				if err == nil || tf != nil {
					t.Fatalf("got %v, %v; want a plain error", res, err)
				}
			}
			if got := len(n.confirmed) > 0; got != tt.confirmed {
				t.Errorf("confirmed: got %v; want %v", n.confirmed, tt.confirmed)
			}
			if got := len(n.rolledBack) > 0; got != tt.rolledBack {
				t.Errorf("rolled back by the agent: got %v; want %v", n.rolledBack, tt.rolledBack)
			}
			for _, id := range append(n.confirmed, n.rolledBack...) {
				if id != try {
					t.Errorf("acted on try %q; want only %s", id, try)
				}
			}
			if tt.wantTrial != 0 && (n.opts.Try != tt.wantTrial || !n.opts.AtLeast || string(n.opts.Data) != string(doc)) {
				t.Errorf("apply options: got try %v at least %v data %q; want try %v at least, the document", n.opts.Try, n.opts.AtLeast, n.opts.Data, tt.wantTrial)
			}
			if tt.resumed != nil && (n.opts.Data != nil || len(sess.restarts) != 0 || len(notes) != 0) {
				t.Errorf("resumed: applied %q, restarted %v, noted %v; want nothing applied, restarted or noted again", n.opts.Data, sess.restarts, notes)
			}
			if n.applyErr != nil || n.opts.Try == 0 {
				return // no trial began
			}
			// a trial began: journalled, then the session restarted
			if len(notes) != 1 || notes[0].id != try {
				t.Errorf("journal: got %v; want try %s noted once", notes, try)
			}
			if tt.noteErr == nil && (len(sess.restarts) != 1 || sess.since.Before(start)) {
				t.Errorf("session: restarts %v, waited for one since %v; want one restart, a session after the apply", sess.restarts, sess.since)
			}
		})
	}
}
