package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/virtcon/virtcon/director/loadgen"
)

// pair is a 3-member etcd cluster and two director replicas over it,
// sharing one ca.kek, with distinct data dirs, ports and replica ids.
type pair struct {
	tmp   string
	etcd  *etcdCluster
	reps  [2]*proc
	addrs [2]string
	data  [2]string
	ids   [2]string
}

func startPair(ctx context.Context, bin, etcdBin, tmp string) (*pair, error) {
	eb, err := buildEtcd(ctx, etcdBin, tmp)
	if err != nil {
		return nil, err
	}
	p := &pair{tmp: tmp, ids: [2]string{"ra", "rb"}}
	if p.etcd, err = startEtcd(ctx, eb, tmp, 3); err != nil {
		return nil, err
	}
	kek := filepath.Join(tmp, "ca.kek") // made by the first replica
	for i := range p.reps {
		if p.addrs[i], err = loopback(); err != nil {
			p.stop()
			return nil, err
		}
		p.data[i] = filepath.Join(tmp, p.ids[i])
		p.reps[i], err = startDirector(ctx, bin, p.data[i], p.addrs[i], filepath.Join(tmp, p.ids[i]+".log"),
			"--etcd-endpoints", p.etcd.endpoints(), "--ca-kek-file", kek, "--replica-id", p.ids[i])
		if err != nil {
			p.stop()
			return nil, err
		}
	}
	return p, nil
}

func (p *pair) stop() {
	for _, r := range p.reps {
		if r != nil {
			r.stop()
		}
	}
	p.etcd.kill()
}

// tempDir is a temporary directory kept (and named) when the run failed,
// for its logs.
func tempDir(name string) (string, func(*error), error) {
	tmp, err := os.MkdirTemp("", name)
	if err != nil {
		return "", nil, err
	}
	return tmp, func(errp *error) {
		if *errp != nil {
			fmt.Fprintf(os.Stderr, "dirload: logs kept in %s\n", tmp)
			return
		}
		os.RemoveAll(tmp)
	}, nil
}

// placement is where each simulated agent last registered, and when.
type placement struct {
	mu      sync.Mutex
	replica []string
	at      []time.Time
}

func newPlacement(n int) *placement {
	return &placement{replica: make([]string, n), at: make([]time.Time, n)}
}

func (pl *placement) registered(i int, replica string) {
	pl.mu.Lock()
	pl.replica[i], pl.at[i] = replica, time.Now()
	pl.mu.Unlock()
}

// count is how many agents registered last on replica (any, for "").
func (pl *placement) count(replica string) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	c := 0
	for _, r := range pl.replica {
		if r != "" && (replica == "" || r == replica) {
			c++
		}
	}
	return c
}

// runFailover: n agents rotating between two replicas over a 3-member
// etcd cluster; kill -9 the replica holding about half; the time from
// the kill to each of its agents' Registered on the other, p50 and p99.
func runFailover(ctx context.Context, bin, etcdBin string, n int) (err error) {
	const target = 15 * time.Second
	tmp, clean, err := tempDir("dirload-failover")
	if err != nil {
		return err
	}
	defer clean(&err)
	p, err := startPair(ctx, bin, etcdBin, tmp)
	if err != nil {
		return err
	}
	defer p.stop()
	ids, err := enrolAll(ctx, adminOf(p.data[0]), n)
	if err != nil {
		return fmt.Errorf("failover: enrol: %w", err)
	}
	fmt.Fprintf(os.Stderr, "dirload: failover: %d agents enrolled\n", n)
	pl := newPlacement(n)
	var st loadgen.Stats
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		loadgen.SessionsWith(sctx, "", "127.0.0.1", ids, loadgen.Options{Period: 10 * time.Second,
			Addrs: p.addrs[:], OnRegistered: pl.registered}, &st)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	if err := waitFor(ctx, "failover: every agent registered", 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		return pl.count("") == n, nil
	}); err != nil {
		return fmt.Errorf("%w (%d of %d)", err, pl.count(""), n)
	}
	time.Sleep(5 * time.Second) // the register-time resyncs settle
	onA := pl.count(p.ids[0])
	killed := time.Now()
	p.reps[0].kill()
	p.reps[0] = nil
	if err := waitFor(ctx, "failover: every agent on "+p.ids[1], time.Minute, 50*time.Millisecond, func() (bool, error) {
		return pl.count(p.ids[1]) == n, nil
	}); err != nil {
		return fmt.Errorf("%w (%d of %d)", err, pl.count(p.ids[1]), n)
	}
	pl.mu.Lock()
	var moved []time.Duration
	for _, at := range pl.at {
		if at.After(killed) {
			moved = append(moved, at.Sub(killed))
		}
	}
	pl.mu.Unlock()
	p50, p99, pmax := pct(moved, 50), pct(moved, 99), pct(moved, 100)
	fmt.Printf("%-44s p50 %6.2f s, p99 %6.2f s (target < %.0f s, %.2fx), max %.2f s; %d agents were on %s, %d moved; load average %s (shared machine)\n",
		fmt.Sprintf("failover: kill -9 1 of 2 replicas, %d agents", n), p50.Seconds(), p99.Seconds(), target.Seconds(),
		p99.Seconds()/target.Seconds(), pmax.Seconds(), onA, p.ids[0], len(moved), loadavg())
	return nil
}
