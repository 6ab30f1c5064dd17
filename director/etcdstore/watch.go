package etcdstore

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one change under a watched prefix.
type Event struct {
	Key     string // relative to the Store's prefix
	Raw     []byte // the JSON value; nil when Deleted
	Rev     int64  // the revision of the change
	Deleted bool
}

// Watch sends every change under prefix from revision fromRev on (0: from
// now), in revision order. The channel closes when ctx ends or the Store
// is closed. A watch cut
// by the server (leader lost, restart, transient error) resumes from the
// revision after the last event sent, so nothing is skipped or repeated.
// If the revision wanted was compacted away, the events in between are
// lost: the error is logged and the channel closes while ctx is still
// live; the caller must List again and Watch from that listing's
// revision + 1. The usual pattern: rev := ListRev(…); Watch(…, rev+1).
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan Event {
	out := make(chan Event, 16)
	go s.watch(ctx, prefix, fromRev, out)
	return out
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
	full := s.prefix + prefix
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if next > 0 {
			opts = append(opts, clientv3.WithRev(next))
		}
		for resp := range s.cli.Watch(wctx, full, opts...) {
			if resp.CompactRevision != 0 {
				s.log.Error("etcd watch: revision compacted; list again", "prefix", prefix, "wanted", next, "compacted", resp.CompactRevision)
				cancel()
				return
			}
			if err := resp.Err(); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("etcd watch interrupted; resuming", "prefix", prefix, "from", next, "err", err)
				}
				break
			}
			if resp.Created {
				if next == 0 {
					// A watch from now starts after the header revision.
					next = resp.Header.Revision + 1
				}
				backoff = 50 * time.Millisecond
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
				select {
				case out <- e:
				case <-ctx.Done():
					cancel()
					return
				}
				next = e.Rev + 1
			}
		}
		cancel()
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
