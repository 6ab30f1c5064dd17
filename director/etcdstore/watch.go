package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// Event is one change under a watched prefix, or a change of the watch's
// own state (Broken, Resumed: no Key then).
type Event struct {
	Key     string // relative to the Store's prefix
	Raw     []byte // the JSON value; nil when Deleted
	Rev     int64  // the revision of the change
	Deleted bool

	// Broken: the watch lost etcd (no answer to its progress requests
	// for a while, or the server cut it); changes made meanwhile arrive
	// late, once it is back. Err says why.
	Broken bool
	Err    error
	// Resumed: after Broken, the watch is back and caught up: every
	// change up to a revision etcd confirmed after the break was sent.
	Resumed bool
}

// Status says whether e is a Broken or Resumed event rather than a change.
func (e Event) Status() bool { return e.Broken || e.Resumed }

// Watch sends every change under prefix from revision fromRev on (0: from
// now), in revision order. The channel closes when ctx ends or the Store
// is closed. A watch cut by the server (leader lost, restart, transient
// error) resumes from the revision after the last event sent, so nothing
// is skipped or repeated; but while it is cut, changes are late: the
// watch sends a Broken event when it notices (the server cut it, or a
// quiet watch's progress request went unanswered for three times
// Options.WatchCheck: the etcd client otherwise retries in silence), and
// a Resumed event once it is back and caught up. A caller that must not
// act on stale state (revocations) treats it as not current in between.
// If the revision wanted was compacted away, the events in between are
// lost: the error is logged and the channel closes while ctx is still
// live; the caller must List again and Watch from that listing's
// revision + 1. The usual pattern: rev := ListRev(…); Watch(…, rev+1).
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan Event {
	out := make(chan Event, 16)
	go s.watch(ctx, prefix, fromRev, out)
	return out
}

// watcher is one Watch's state across the client watches it makes.
type watcher struct {
	s      *Store
	ctx    context.Context
	prefix string
	out    chan<- Event
	next   int64 // the revision to resume from
	broken bool
}

func (s *Store) watch(ctx context.Context, prefix string, next int64, out chan<- Event) {
	defer close(out)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-s.done:
			stop()
		case <-ctx.Done():
		}
	}()
	// The client shares one gRPC stream among watches whose contexts
	// carry the same metadata, and answers a progress request on a
	// stream only once every watch on it is caught up: a stream of its
	// own makes each answer this watch's.
	mctx := metadata.AppendToOutgoingContext(ctx, "virtcon-watch", strconv.FormatUint(s.watchSeq.Add(1), 10))
	w := &watcher{s: s, ctx: mctx, prefix: prefix, out: out, next: next}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		again, created := w.run()
		if !again {
			return
		}
		if created {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

func (w *watcher) send(e Event) bool {
	select {
	case w.out <- e:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// breaks reports the watch Broken (once until it resumes); false when ctx
// ended.
func (w *watcher) breaks(err error) bool {
	if w.ctx.Err() != nil {
		return false
	}
	if w.broken {
		return true
	}
	w.broken = true
	w.s.log.Warn("etcd watch broken: changes are late until it resumes", "prefix", w.prefix, "from", w.next, "err", err)
	return w.send(Event{Broken: true, Err: err})
}

// run is one client watch, until it ends: again false when the whole
// watch is over (ctx, compaction), created whether the server took it.
func (w *watcher) run() (again, created bool) {
	s := w.s
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
	if w.next > 0 {
		opts = append(opts, clientv3.WithRev(w.next))
	}
	full := s.prefix + w.prefix
	wch := s.cli.Watch(wctx, full, opts...)
	// ask requests a progress notification: etcd answers once the watch
	// has sent every change up to its current revision, but only when
	// that revision has reached the watch's start (not for a quiet watch
	// that started after the last write).
	var asking atomic.Bool
	ask := func() {
		if asking.CompareAndSwap(false, true) {
			go func() {
				// Waits while the client reconnects; ends with wctx.
				_ = s.cli.RequestProgress(wctx)
				asking.Store(false)
			}()
		}
	}
	// check reads one key (linearizable: etcd and a leader answer) for
	// the store's revision.
	type checked struct {
		rev int64
		err error
	}
	checks := make(chan checked, 1)
	checking := false
	check := func() {
		if checking {
			return
		}
		checking = true
		go func() {
			cctx, cancel := context.WithTimeout(wctx, 2*s.watchCheck)
			resp, err := s.cli.Get(cctx, full)
			cancel()
			c := checked{err: err}
			if err == nil {
				c.rev = resp.Header.Revision
			}
			checks <- c // buffered: one check at a time
		}()
	}
	resumed := func(rev int64) bool {
		w.broken = false
		s.log.Info("etcd watch resumed", "prefix", w.prefix, "at", rev)
		return w.send(Event{Resumed: true, Rev: rev})
	}
	tick := time.NewTicker(s.watchCheck)
	defer tick.Stop()
	heard := time.Now()
	for {
		select {
		case <-w.ctx.Done():
			return false, created
		case now := <-tick.C:
			silent := now.Sub(heard)
			if silent >= 3*s.watchCheck && !w.breaks(fmt.Errorf("no answer from etcd for %s", silent.Round(time.Millisecond))) {
				return false, created
			}
			if silent >= s.watchCheck || w.broken {
				check()
			}
		case c := <-checks:
			checking = false
			if c.err != nil {
				continue // the silence goes on
			}
			heard = time.Now()
			if !w.broken {
				continue
			}
			if c.rev < w.next {
				// Nothing was written since the last change sent:
				// caught up.
				if !resumed(c.rev) {
					return false, created
				}
				continue
			}
			ask()
		case resp, ok := <-wch:
			if !ok {
				return w.breaks(errors.New("watch closed by the client")), created
			}
			heard = time.Now()
			if resp.CompactRevision != 0 {
				s.log.Error("etcd watch: revision compacted; list again", "prefix", w.prefix, "wanted", w.next, "compacted", resp.CompactRevision)
				return false, created
			}
			if err := resp.Err(); err != nil {
				return w.breaks(err), created
			}
			if resp.Created {
				created = true
				if w.next == 0 {
					// A watch from now starts after the header revision.
					w.next = resp.Header.Revision + 1
				}
				if w.broken {
					check()
				}
				continue
			}
			for _, ev := range resp.Events {
				e := Event{
					Key:     strings.TrimPrefix(string(ev.Kv.Key), s.prefix),
					Rev:     ev.Kv.ModRevision,
					Deleted: ev.Type == mvccpb.DELETE,
				}
				if !e.Deleted {
					e.Raw = ev.Kv.Value
				}
				if !w.send(e) {
					return false, created
				}
				w.next = e.Rev + 1
			}
			if resp.IsProgressNotify() {
				// Every change up to the header's revision was sent: a
				// resume starts after it (a quiet watch then outlives
				// compactions of others' keys).
				if r := resp.Header.Revision + 1; r > w.next {
					w.next = r
				}
				if w.broken && !resumed(resp.Header.Revision) {
					return false, created
				}
			}
		}
	}
}
