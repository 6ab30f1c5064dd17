package etcdstore

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/virtcon/virtcon/internal/flock"
)

// DefaultPrefix is where the director's keys live when Options.Prefix is
// empty.
const DefaultPrefix = "/virtcon-director/v1/"

// ErrNotFound is returned (wrapped, naming the key) by Get for an absent key.
var ErrNotFound = errors.New("key not found")

// ErrLocked is returned (wrapped, naming the dir and, when known, the pid
// holding it) by Open when another process has the data dir.
var ErrLocked = errors.New("data dir in use by another process")

// Options says which etcd the Store uses.
type Options struct {
	// DataDir holds the embedded member (DataDir/etcd, 0700), its client
	// socket DataDir/etcd.sock (0600) and the lock DataDir/lock. When set,
	// the Store holds the lock for its lifetime in both modes: whoever owns
	// DataDir takes no lock of its own.
	DataDir string
	// Endpoints selects an external cluster instead of the embedded member.
	Endpoints []string
	// CACert, Cert and Key are PEM files for the external cluster's TLS
	// (all optional; Cert and Key go together).
	CACert, Cert, Key string
	// Prefix is prepended to every key; DefaultPrefix when empty. A "/" is
	// appended when missing, so "/a" never sees "/ab/…".
	Prefix string
	// UnsafeNoFsync makes the embedded member skip fsync: tests only.
	UnsafeNoFsync bool
	// Logger receives etcd's logs (nil: discarded).
	Logger *slog.Logger
	// WatchCheck is how often a quiet watch asks etcd for its progress
	// (DefaultWatchCheck when 0); one that hears nothing for three times
	// this reports itself Broken (see Watch).
	WatchCheck time.Duration
	// RequestTimeout bounds every request (Get, Put, Delete, each List
	// page, Txn.Commit, lease grants) whose ctx has no sooner deadline
	// (DefaultRequestTimeout when 0): one etcd does not answer in time
	// fails with ErrUnavailable.
	RequestTimeout time.Duration
}

// DefaultWatchCheck is Options.WatchCheck's default.
const DefaultWatchCheck = time.Second

// listPage is how many keys one List round trip reads.
const listPage = 500

// probeTimeout bounds Open's first request when ctx has no sooner deadline.
const probeTimeout = 10 * time.Second

// Store is a JSON key-value view of one prefix of an etcd cluster.
type Store struct {
	prefix   string
	endpoint string
	log      *slog.Logger
	cli      *clientv3.Client
	etcd     *embed.Etcd
	lock     *flock.Lock
	pageSize int64
	now      func() time.Time

	watchCheck     time.Duration
	requestTimeout time.Duration
	watchSeq       atomic.Uint64 // gives each watch a gRPC stream of its own

	leaseMu sync.Mutex
	leases  map[leaseKey]clientv3.LeaseID

	done      chan struct{} // closed by Close: ends the watches
	closeOnce sync.Once
	closeErr  error
}

// Open starts the embedded member (or connects to Options.Endpoints) and
// returns once a linearizable read has succeeded.
func Open(ctx context.Context, opts Options) (_ *Store, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if opts.DataDir == "" && len(opts.Endpoints) == 0 {
		return nil, errors.New("etcdstore: neither a data dir nor etcd endpoints given")
	}
	if (opts.Cert == "") != (opts.Key == "") {
		return nil, fmt.Errorf("etcdstore: etcd client cert %q and key %q: give both or neither", opts.Cert, opts.Key)
	}
	zl := zapLogger(log.With("component", "etcd"))
	s := &Store{
		prefix:   prefix,
		log:      log,
		pageSize: listPage,
		now:      time.Now,
		leases:   map[leaseKey]clientv3.LeaseID{},
		done:     make(chan struct{}),

		watchCheck:     opts.WatchCheck,
		requestTimeout: opts.RequestTimeout,
	}
	if s.watchCheck <= 0 {
		s.watchCheck = DefaultWatchCheck
	}
	if s.requestTimeout <= 0 {
		s.requestTimeout = DefaultRequestTimeout
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	var dataDir string
	if opts.DataDir != "" {
		if dataDir, err = filepath.Abs(opts.DataDir); err != nil {
			return nil, fmt.Errorf("etcdstore: data dir %q: %w", opts.DataDir, err)
		}
		if len(opts.Endpoints) == 0 {
			if err := checkSocketPath(dataDir); err != nil {
				return nil, err // before anything is created
			}
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("etcdstore: %w", err)
		}
		if s.lock, err = lockDir(dataDir); err != nil {
			return nil, err
		}
	}

	endpoints := opts.Endpoints
	var tlsCfg *tls.Config
	if len(endpoints) == 0 {
		cfg, clientURL, err := embedConfig(dataDir, opts, zl)
		if err != nil {
			return nil, err
		}
		if s.etcd, err = startEmbedded(ctx, cfg); err != nil {
			return nil, err
		}
		endpoints = []string{clientURL}
	} else if opts.CACert != "" || opts.Cert != "" {
		info := transport.TLSInfo{CertFile: opts.Cert, KeyFile: opts.Key, TrustedCAFile: opts.CACert, Logger: zl}
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcdstore: etcd TLS: %w", err)
		}
	}
	s.endpoint = endpoints[0]
	where := strings.Join(endpoints, ", ")

	s.cli, err = clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		TLS:                  tlsCfg,
		Logger:               zl,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: etcd at %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := s.cli.Get(pctx, prefix, clientv3.WithCountOnly()); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("etcdstore: etcd at %s: no answer: %w", where, err)
		}
		return nil, fmt.Errorf("etcdstore: etcd at %s: %w", where, err)
	}
	return s, nil
}

// Close closes the client, then stops the embedded member, then releases
// the data dir lock.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		var errs []error
		if s.cli != nil {
			errs = append(errs, s.cli.Close())
		}
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.lock != nil {
			errs = append(errs, s.lock.Release())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Client is the underlying etcd client (elections, leases, sessions). Keys
// used through it are not prefixed for the caller: use Prefix.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix is the key prefix, ending in "/".
func (s *Store) Prefix() string { return s.prefix }

// Endpoint is the client URL: the embedded member's unix socket
// (unix:///…/etcd.sock), or the first external endpoint.
func (s *Store) Endpoint() string { return s.endpoint }

func (s *Store) key(k string) (string, error) {
	if k == "" {
		return "", errors.New("etcdstore: empty key")
	}
	return s.prefix + k, nil
}

// Get decodes the JSON value of key into v (nil: only checks it is JSON)
// and returns its ModRevision. An absent key is ErrNotFound; a value that
// does not decode is an error naming the key, never "absent".
func (s *Store) Get(ctx context.Context, key string, v any) (int64, error) {
	k, err := s.key(key)
	if err != nil {
		return 0, err
	}
	rctx, done := s.request(ctx)
	resp, err := s.cli.Get(rctx, k)
	if err := done(err); err != nil {
		return 0, fmt.Errorf("etcdstore: get %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("etcdstore: key %q: %w", key, ErrNotFound)
	}
	kv := resp.Kvs[0]
	if v == nil {
		if !json.Valid(kv.Value) {
			return 0, fmt.Errorf("etcdstore: key %q: value is not JSON", key)
		}
	} else if err := json.Unmarshal(kv.Value, v); err != nil {
		return 0, fmt.Errorf("etcdstore: key %q: decode value: %w", key, err)
	}
	return kv.ModRevision, nil
}

// Put stores v as JSON under key. A ttl > 0 attaches a lease: the key
// disappears no sooner than ttl later (see lease for how much later).
func (s *Store) Put(ctx context.Context, key string, v any, ttl time.Duration) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("etcdstore: put %q: negative ttl %s", key, ttl)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("etcdstore: put %q: encode: %w", key, err)
	}
	ctx, done := s.request(ctx) // one bound for the grant and the put
	for attempt := 0; ; attempt++ {
		var opts []clientv3.OpOption
		var id clientv3.LeaseID
		if ttl > 0 {
			if id, err = s.lease(ctx, ttl); err != nil {
				return fmt.Errorf("etcdstore: put %q: %w", key, done(err))
			}
			opts = append(opts, clientv3.WithLease(id))
		}
		_, err = s.cli.Put(ctx, k, string(b), opts...)
		if id != 0 && attempt == 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.forgetLease(id) // revoked behind our back: take a fresh one once
			continue
		}
		if err := done(err); err != nil {
			return fmt.Errorf("etcdstore: put %q: %w", key, err)
		}
		return nil
	}
}

// Delete removes key; an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	rctx, done := s.request(ctx)
	_, err = s.cli.Delete(rctx, k)
	if err := done(err); err != nil {
		return fmt.Errorf("etcdstore: delete %q: %w", key, err)
	}
	return nil
}

// List calls each for every key under prefix (relative to the Store's
// prefix), in key order, one page of keys at a time; all pages are read at
// the revision of the first. An error from each stops the listing and is
// returned as is.
func (s *Store) List(ctx context.Context, prefix string, each func(key string, rev int64, raw []byte) error) error {
	_, err := s.ListRev(ctx, prefix, each)
	return err
}

// ListRev is List that also returns the store revision the listing was
// read at: Watch(ctx, prefix, rev+1) then sees every change after it.
func (s *Store) ListRev(ctx context.Context, prefix string, each func(key string, rev int64, raw []byte) error) (int64, error) {
	start := s.prefix + prefix
	end := clientv3.GetPrefixRangeEnd(start)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(s.pageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		rctx, done := s.request(ctx)
		resp, err := s.cli.Get(rctx, start, opts...)
		if err := done(err); err != nil {
			return 0, fmt.Errorf("etcdstore: list %q: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := each(strings.TrimPrefix(string(kv.Key), s.prefix), kv.ModRevision, kv.Value); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
