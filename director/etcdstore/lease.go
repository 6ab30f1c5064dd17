package etcdstore

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseShare is the TTL from which keys share leases, and the width of the
// time bucket in which they do.
const leaseShare = time.Hour

type leaseKey struct {
	ttl    time.Duration // rounded up to the minute
	bucket int64         // unix time of the hour the lease was taken in
}

// lease returns a lease that outlives ttl from now.
//
// A ttl under an hour gets a lease of its own (ttl rounded up to the
// second; etcd raises it to its minimum, 2 s with our election timeout).
// From an hour up, keys share: one lease per (ttl rounded up to the minute,
// wall-clock hour), granted for that ttl plus an hour, so a key written at
// any moment of the hour lives at least ttl and at most ttl + 1 h 1 min.
// Writing 100k audit entries with a 30-day TTL thus costs ~720 leases a
// month (one an hour), not 100k. Leases survive a restart with their
// remaining TTL (lease checkpoints, every 5 min: a restart can add up to
// that much to a lease).
func (s *Store) lease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	if ttl < leaseShare {
		secs := int64((ttl + time.Second - 1) / time.Second)
		resp, err := s.cli.Grant(ctx, secs)
		if err != nil {
			return 0, fmt.Errorf("lease of %ds: %w", secs, err)
		}
		return resp.ID, nil
	}
	rounded := (ttl + time.Minute - 1).Truncate(time.Minute)
	bucket := s.now().Truncate(leaseShare).Unix()
	k := leaseKey{ttl: rounded, bucket: bucket}

	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if id, ok := s.leases[k]; ok {
		return id, nil
	}
	for old := range s.leases {
		if old.bucket < bucket {
			delete(s.leases, old)
		}
	}
	secs := int64((rounded + leaseShare) / time.Second)
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return 0, fmt.Errorf("lease of %ds: %w", secs, err)
	}
	s.leases[k] = resp.ID
	return resp.ID, nil
}

// forgetLease drops a shared lease that etcd no longer knows.
func (s *Store) forgetLease(id clientv3.LeaseID) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	for k, v := range s.leases {
		if v == id {
			delete(s.leases, k)
		}
	}
}
