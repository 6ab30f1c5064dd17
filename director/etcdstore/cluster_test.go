package etcdstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/director/etcdstore/etcdtest"
	"github.com/virtcon/virtcon/internal/reexec"
)

// These tests run a 3-member etcd cluster as real processes (etcdtest):
// what quorum loss and a leader's death do to the Store.

func startCluster(t *testing.T) *etcdtest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster as processes and kills members: not under -short")
	}
	return etcdtest.StartCluster(t, 3, etcdtest.Opts{NoFsync: true})
}

func clusterStore(t *testing.T, c *etcdtest.Cluster, opts Options) *Store {
	t.Helper()
	opts.Endpoints = c.Endpoints()
	if opts.Prefix == "" {
		opts.Prefix = "/test/" + t.Name() + "/"
	}
	s, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// others are the member indexes other than i.
func others(c *etcdtest.Cluster, i int) []int {
	var out []int
	for j := range c.Len() {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

func waitHealthy(t *testing.T, c *etcdtest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// Two of three members dead: a write fails with ErrUnavailable and the
// request timeout's words in bounded time (etcd alone answers after ~7 s,
// or never when the live member is unreachable too); both back: writes
// work again.
func TestClusterQuorumLoss(t *testing.T) {
	c := startCluster(t)
	s := clusterStore(t, c, Options{})
	ctx := t.Context()
	if err := s.Put(ctx, "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(ctx)
	if leader < 0 {
		t.Fatal("no leader")
	}
	// the leader and one more: the survivor is a follower with no quorum
	dead := []int{leader, others(c, leader)[0]}
	for _, i := range dead {
		c.Kill(i)
	}
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"put", func() error { return s.Put(ctx, "k", 2, 0) }},
		{"linearizable get", func() error { _, err := s.Get(ctx, "k", nil); return err }},
		{"txn", func() error { _, err := s.Txn().IfAbsent("t").Put("t", 1, 0).Commit(ctx); return err }},
	} {
		start := time.Now()
		err := op.do()
		took := time.Since(start)
		t.Logf("%s with 2 of 3 members dead: %s after %s", op.name, err, took.Round(time.Millisecond))
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: got %v; want ErrUnavailable", op.name, err)
		}
		if took > 4500*time.Millisecond {
			t.Errorf("%s failed after %s; want within ~3-4 s", op.name, took)
		}
		var ue *UnavailableError
		if errors.As(err, &ue) && ue.Timeout > 0 && !strings.Contains(err.Error(), "etcd: no answer within 3s: cluster without quorum or unreachable") {
			t.Errorf("%s: error %q; want the request timeout's words", op.name, err)
		}
	}
	restarted := time.Now()
	for _, i := range dead {
		c.Restart(i)
	}
	waitHealthy(t, c)
	t.Logf("members restarted: healthy after %s", time.Since(restarted).Round(time.Millisecond))
	if err := s.Put(ctx, "k", 3, 0); err != nil {
		t.Fatalf("put after the members came back: %v", err)
	}
	t.Logf("members restarted: a put done after %s", time.Since(restarted).Round(time.Millisecond))
	var v int
	if _, err := s.Get(ctx, "k", &v); err != nil || v != 3 {
		t.Fatalf("get after restore: got %d, %v; want 3", v, err)
	}
}

// The leader killed: writes fail for a few seconds at most (an election
// after 1 s of silence), then go on through the survivors.
func TestClusterLeaderKill(t *testing.T) {
	c := startCluster(t)
	s := clusterStore(t, c, Options{})
	ctx := t.Context()
	if err := s.Put(ctx, "w", 0, 0); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(ctx)
	if leader < 0 {
		t.Fatal("no leader")
	}
	type result struct {
		at  time.Time
		err error
	}
	results := make(chan result, 1024)
	stop := make(chan struct{})
	go func() {
		defer close(results)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := s.Put(ctx, "w", i, 0)
			results <- result{time.Now(), err}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	c.Kill(leader)
	// run until writes have worked for 1 s after the kill, 15 s at most
	var firstFail, lastFail, resumed time.Time
	var fails, oks int
	deadline := time.After(15 * time.Second)
loop:
	for {
		select {
		case r := <-results:
			if r.at.Before(killed) {
				continue
			}
			if r.err != nil {
				fails++
				if firstFail.IsZero() {
					firstFail = r.at
				}
				lastFail = r.at
				resumed = time.Time{}
				continue
			}
			oks++
			if resumed.IsZero() {
				resumed = r.at
			}
			if r.at.Sub(resumed) > time.Second {
				break loop
			}
		case <-deadline:
			break loop
		}
	}
	close(stop)
	for range results {
	}
	if resumed.IsZero() {
		t.Fatalf("writes did not resume within 15 s of killing the leader (%d failed)", fails)
	}
	window := time.Duration(0)
	if !firstFail.IsZero() {
		window = lastFail.Sub(killed)
	}
	t.Logf("leader (member %d) killed: %d writes failed, failed window %s (kill to last failure), first success after the kill at +%s",
		leader, fails, window.Round(time.Millisecond), resumed.Sub(killed).Round(time.Millisecond))
	if window > 5*time.Second {
		t.Errorf("writes failed for %s after the leader's kill; want at most a few seconds (5 s)", window)
	}
	if l := c.Leader(ctx); l < 0 || l == leader {
		t.Errorf("leader after the kill: member %d; want one of %v", l, others(c, leader))
	}
}

// A KeepAliveLease survives a quorum loss shorter than its TTL, reports
// Lost after one longer than its TTL, and a new one is granted once
// quorum is back.
func TestClusterKeepAliveLeaseQuorumLoss(t *testing.T) {
	c := startCluster(t)
	s := clusterStore(t, c, Options{})
	ctx := t.Context()
	outage := func(d time.Duration) {
		t.Helper()
		leader := c.Leader(ctx)
		if leader < 0 {
			t.Fatal("no leader")
		}
		dead := []int{leader, others(c, leader)[0]}
		for _, i := range dead {
			c.Kill(i)
		}
		time.Sleep(d)
		for _, i := range dead {
			c.Restart(i)
		}
		waitHealthy(t, c)
	}

	t.Run("shorter than the TTL", func(t *testing.T) {
		l, err := s.KeepAliveLease(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Revoke(ctx)
		if err := s.PutLease(ctx, "replicas/r1", 1, l); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		outage(time.Second)
		t.Logf("quorum lost and back after %s (TTL %s)", time.Since(start).Round(time.Millisecond), l.TTL())
		// kept through it, and still kept a TTL later
		select {
		case <-l.Lost():
			t.Fatal("lease lost across a quorum loss shorter than its TTL")
		case <-time.After(l.TTL()):
		}
		if _, err := s.Get(ctx, "replicas/r1", nil); err != nil {
			t.Errorf("key on the lease after the outage: %v; want it kept", err)
		}
	})
	t.Run("longer than the TTL", func(t *testing.T) {
		l, err := s.KeepAliveLease(ctx, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Revoke(ctx)
		if err := s.PutLease(ctx, "replicas/r2", 1, l); err != nil {
			t.Fatal(err)
		}
		lostAt := make(chan time.Time, 1)
		go func() { <-l.Lost(); lostAt <- time.Now() }()
		start := time.Now()
		outage(6 * time.Second)
		select {
		case at := <-lostAt:
			t.Logf("lease (TTL %s) reported lost %s after the quorum loss began", l.TTL(), at.Sub(start).Round(time.Millisecond))
			if at.Sub(start) > l.TTL()+2*time.Second {
				t.Errorf("Lost %s after the quorum loss began; want within the TTL (%s) and ~1 s", at.Sub(start), l.TTL())
			}
		default:
			t.Fatal("lease not reported lost after a quorum loss longer than its TTL")
		}
		// regranted once quorum is back; the key moves to the new lease
		l2, err := s.KeepAliveLease(ctx, 3*time.Second)
		if err != nil {
			t.Fatalf("new lease after the restore: %v", err)
		}
		defer l2.Revoke(ctx)
		if err := s.PutLease(ctx, "replicas/r2", 2, l2); err != nil {
			t.Fatalf("put on the new lease: %v", err)
		}
		// the old lease, extended by the new leader, expires: the key stays
		time.Sleep(l.TTL() + 1500*time.Millisecond)
		var v int
		if _, err := s.Get(ctx, "replicas/r2", &v); err != nil || v != 2 {
			t.Errorf("key on the new lease after the old one expired: got %d, %v; want 2", v, err)
		}
		select {
		case <-l2.Lost():
			t.Error("new lease lost while the cluster is healthy")
		default:
		}
	})
}

// campaignHelper is a campaigning replica in a process of its own (a
// child mode of this test binary, started by TestClusterCampaignFailover):
// it wins the election, says so, and waits to be killed.
const campaignHelper = "etcdstore-campaign-helper"

// campaignHelperEnv carries the cluster's endpoints and the prefix to it.
const campaignHelperEnv = "VIRTCON_ETCDSTORE_CAMPAIGN_ENDPOINTS"

func init() {
	reexec.Register(campaignHelper, func() int {
		s, err := Open(context.Background(), Options{Endpoints: strings.Split(os.Getenv(campaignHelperEnv), ","), Prefix: os.Getenv(campaignHelperEnv + "_PREFIX")})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if _, err := s.Campaign(context.Background(), "singletons", "helper", 2*time.Second); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("leader")
		select {}
	})
}

// The leading replica's process is killed -9: the other candidate wins
// once the leader's session lease expires (TTL 2 s).
func TestClusterCampaignFailover(t *testing.T) {
	c := startCluster(t)
	prefix := "/test/" + t.Name() + "/"
	s := clusterStore(t, c, Options{Prefix: prefix})
	ctx := t.Context()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := reexec.Command(ctx, exe, campaignHelper,
		append(os.Environ(), campaignHelperEnv+"="+strings.Join(c.Endpoints(), ","), campaignHelperEnv+"_PREFIX="+prefix))
	helper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { helper.Process.Kill(); helper.Wait() }()
	said := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); l == "leader" || strings.HasPrefix(l, "error:") {
				said <- l
			}
		}
		close(said)
	}()
	select {
	case l := <-said:
		if l != "leader" {
			t.Fatalf("helper: %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("helper process did not win the election within 30 s")
	}
	if v, err := s.Leader(ctx, "singletons"); err != nil || v != "helper" {
		t.Fatalf("Leader: got %q, %v; want helper", v, err)
	}
	won := make(chan *Leadership, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := s.Campaign(ctx, "singletons", "r2", 2*time.Second)
		if err != nil {
			errs <- err
			return
		}
		won <- l
	}()
	select {
	case <-won:
		t.Fatal("won while the helper leads")
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(500 * time.Millisecond):
	}
	killed := time.Now()
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-won:
		took := time.Since(killed)
		t.Logf("leadership moved %s after the leader's process was killed (session TTL 2 s)", took.Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("takeover took %s; want within the TTL and a little", took)
		}
		if v, err := s.Leader(ctx, "singletons"); err != nil || v != "r2" {
			t.Errorf("Leader after the takeover: got %q, %v; want r2", v, err)
		}
		l.Resign(ctx)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the other candidate did not win within 10 s of the leader's kill")
	}
}
