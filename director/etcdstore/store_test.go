package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/virtcon/virtcon/director/etcdstore/etcdtest"
	"github.com/virtcon/virtcon/internal/reexec"
)

// shared is one embedded member for the whole test binary; most tests
// open their own Store on it as an "external" cluster with a prefix of
// their own, as the director's tests do.
var shared *Store

func TestMain(m *testing.M) {
	reexec.Init() // the campaign helper (cluster_test.go) runs here, with no shared member
	dir, err := os.MkdirTemp("", "es")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	shared, err = Open(ctx, Options{DataDir: dir, UnsafeNoFsync: true})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	shared.Close()
	os.RemoveAll(dir)
	etcdtest.RemoveBuilt()
	os.Exit(code)
}

var prefixes atomic.Int64

// newStore is a Store on the shared member under a fresh prefix.
func newStore(t *testing.T) *Store {
	t.Helper()
	prefix := fmt.Sprintf("/test/%s-%d/", t.Name(), prefixes.Add(1))
	s, err := Open(t.Context(), Options{Endpoints: []string{shared.Endpoint()}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// tempDir is a short data dir: t.TempDir() paths can pass the 108-byte
// unix socket limit.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "es")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type rec struct {
	V    int    `json:"v"`
	Name string `json:"name"`
}

func TestPutGetListDelete(t *testing.T) {
	s := newStore(t)
	s.pageSize = 7 // 50 keys: 8 pages
	ctx := t.Context()
	for i := range 50 {
		if err := s.Put(ctx, fmt.Sprintf("nodes/%03d", i), rec{V: 1, Name: fmt.Sprint(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, "nodesX", rec{}, 0); err != nil { // not under "nodes/"
		t.Fatal(err)
	}
	var got rec
	rev, err := s.Get(ctx, "nodes/007", &got)
	if err != nil {
		t.Fatal(err)
	}
	if got != (rec{V: 1, Name: "7"}) || rev == 0 {
		t.Fatalf("Get = %+v rev %d; want {1 7} and a revision", got, rev)
	}

	var keys []string
	listRev, err := s.ListRev(ctx, "nodes/", func(key string, rev int64, raw []byte) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 50 || keys[0] != "nodes/000" || keys[49] != "nodes/049" {
		t.Fatalf("List = %d keys %v…; want nodes/000…nodes/049", len(keys), keys[:min(3, len(keys))])
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("List not sorted: %q before %q", keys[i-1], keys[i])
		}
	}
	if listRev < rev {
		t.Fatalf("ListRev = %d; want >= %d", listRev, rev)
	}

	stop := errors.New("stop")
	n := 0
	if err := s.List(ctx, "nodes/", func(string, int64, []byte) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) || n != 3 {
		t.Fatalf("List with a stopping callback = %v after %d; want stop after 3", err, n)
	}

	if err := s.Delete(ctx, "nodes/007"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "nodes/007", &got); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nodes/007") {
		t.Fatalf("Get after Delete = %v; want ErrNotFound naming the key", err)
	}
	if err := s.Delete(ctx, "nodes/007"); err != nil {
		t.Fatalf("Delete of an absent key = %v; want nil", err)
	}
	if err := s.Put(ctx, "", 1, 0); err == nil {
		t.Fatal("Put of an empty key succeeded")
	}
}

func TestGetGarbageIsAnError(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if _, err := s.Client().Put(ctx, s.Prefix()+"tokens/bad", "{not json"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{&rec{}, nil} {
		_, err := s.Get(ctx, "tokens/bad", v)
		if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"tokens/bad"`) {
			t.Errorf("Get(%T) of garbage = %v; want a decode error naming the key, not ErrNotFound", v, err)
		}
	}
}

func TestTxnConditions(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	ok, err := s.Txn().IfAbsent("a").Put("a", rec{V: 1}, 0).Commit(ctx)
	if err != nil || !ok {
		t.Fatalf("IfAbsent on an absent key = %v, %v; want true", ok, err)
	}
	ok, err = s.Txn().IfAbsent("a").Put("a", rec{V: 2}, 0).Commit(ctx)
	if err != nil || ok {
		t.Fatalf("IfAbsent on a present key = %v, %v; want false", ok, err)
	}
	var got rec
	rev, err := s.Get(ctx, "a", &got)
	if err != nil || got.V != 1 {
		t.Fatalf("after a failed txn: %+v, %v; want V 1", got, err)
	}
	ok, err = s.Txn().IfRev("a", rev+1000).Put("a", rec{V: 3}, 0).Commit(ctx)
	if err != nil || ok {
		t.Fatalf("IfRev with a wrong rev = %v, %v; want false", ok, err)
	}
	ok, err = s.Txn().IfRev("a", rev).IfRev("b", 0).Put("a", rec{V: 4}, 0).Put("b", rec{V: 4}, 0).Commit(ctx)
	if err != nil || !ok {
		t.Fatalf("IfRev with the right rev and rev 0 for absent = %v, %v; want true", ok, err)
	}
	ok, err = s.Txn().IfRev("b", 0).Delete("a").Commit(ctx)
	if err != nil || ok {
		t.Fatalf("IfRev 0 on a present key = %v, %v; want false", ok, err)
	}
	if _, err := s.Get(ctx, "a", &got); err != nil || got.V != 4 {
		t.Fatalf("a = %+v, %v; want V 4 (the delete must not have run)", got, err)
	}
	if _, err := s.Txn().Put("c", make(chan int), 0).Commit(ctx); err == nil {
		t.Fatal("a txn with an unencodable value committed")
	}
}

func TestCASRace(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "tokens/t1", rec{V: 1, Name: "unused"}, 0); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		rev, err := s.Get(ctx, "tokens/t1", nil)
		if err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 20 {
			wg.Go(func() {
				<-start
				ok, err := s.Txn().IfRev("tokens/t1", rev).Put("tokens/t1", rec{V: 1, Name: fmt.Sprint(i)}, 0).Commit(ctx)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d winners; want exactly 1", round, n)
		}
	}
}

func TestWatchAfterListRevHasNoGap(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for _, k := range []string{"n/1", "n/2"} {
		if err := s.Put(ctx, k, rec{V: 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	listRev, err := s.ListRev(ctx, "n/", func(string, int64, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Written after the listing and before the watch exists: must arrive.
	if err := s.Put(ctx, "n/3", rec{V: 3}, 0); err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(ctx, "n/", listRev+1)
	if err := s.Put(ctx, "other/x", rec{}, 0); err != nil { // outside the prefix
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "n/1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "n/2", rec{V: 2}, 0); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key     string
		deleted bool
		raw     string
	}{{"n/3", false, `{"v":3,"name":""}`}, {"n/1", true, ""}, {"n/2", false, `{"v":2,"name":""}`}}
	var last int64 = listRev
	for i, w := range want {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed before event %d", i)
			}
			if e.Key != w.key || e.Deleted != w.deleted || string(e.Raw) != w.raw || e.Rev <= last {
				t.Fatalf("event %d = %+v (raw %s); want key %s deleted %v raw %s rev > %d", i, e, e.Raw, w.key, w.deleted, w.raw, last)
			}
			last = e.Rev
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %d (%s) after 5 s", i, w.key)
		}
	}
	cancel()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel still open 5 s after its ctx ended")
	}
}

func TestWatchFromCompactedRevisionCloses(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "c/1", 1, 0); err != nil {
		t.Fatal(err)
	}
	old, err := s.Get(ctx, "c/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "c/1", 2, 0); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Get(ctx, "c/1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(ctx, "c/", old)
	select {
	case e, ok := <-ch:
		if ok {
			t.Fatalf("watch from a compacted revision sent %+v; want it closed (the caller lists again)", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch from a compacted revision neither closed nor sent within 5 s")
	}
	if ctx.Err() != nil {
		t.Fatal("ctx ended: the close proves nothing")
	}
}

func TestTTL(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "short", 1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "forever", 1, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := s.Get(ctx, "short", nil)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 8*time.Second {
			t.Fatal("a key with a 2 s TTL still there after 8 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("a 2 s TTL key vanished after %s", d)
	}
	if _, err := s.Get(ctx, "forever", nil); err != nil {
		t.Fatalf("the key without TTL: %v", err)
	}
}

func TestLongTTLsShareALease(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	const month = 30 * 24 * time.Hour
	for i := range 30 {
		if err := s.Put(ctx, fmt.Sprintf("audit/%02d", i), i, month); err != nil {
			t.Fatal(err)
		}
	}
	ok, err := s.Txn().IfAbsent("audit/tx").Put("audit/tx", 1, month).Commit(ctx)
	if err != nil || !ok {
		t.Fatalf("txn put with ttl = %v, %v", ok, err)
	}
	resp, err := s.Client().Get(ctx, s.Prefix()+"audit/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	leases := map[clientv3.LeaseID]bool{}
	for _, kv := range resp.Kvs {
		leases[clientv3.LeaseID(kv.Lease)] = true
	}
	if len(resp.Kvs) != 31 || len(leases) != 1 || leases[0] {
		t.Fatalf("%d keys on %d leases %v; want 31 keys on one lease", len(resp.Kvs), len(leases), leases)
	}
	for id := range leases {
		ttl, err := s.Client().TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(ttl.TTL) * time.Second; got < month || got > month+leaseShare+time.Minute {
			t.Fatalf("shared lease TTL %s; want between %s and %s", got, month, month+leaseShare+time.Minute)
		}
	}
	// A new hour: a new lease.
	s.now = func() time.Time { return time.Now().Add(leaseShare) }
	if err := s.Put(ctx, "audit/next-hour", 1, month); err != nil {
		t.Fatal(err)
	}
	r, err := s.Client().Get(ctx, s.Prefix()+"audit/next-hour")
	if err != nil {
		t.Fatal(err)
	}
	if leases[clientv3.LeaseID(r.Kvs[0].Lease)] {
		t.Fatal("a key written in the next hour reused the previous hour's lease")
	}
	// A lease revoked behind the Store's back is replaced, not an error.
	if _, err := s.Client().Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "audit/after-revoke", 1, month); err != nil {
		t.Fatalf("Put after the shared lease was revoked: %v", err)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := tempDir(t)
	a, err := Open(t.Context(), Options{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, opts := range []Options{
		{DataDir: dir, UnsafeNoFsync: true},
		{DataDir: dir, Endpoints: []string{a.Endpoint()}}, // external mode holds the dir too
	} {
		start := time.Now()
		_, err = Open(t.Context(), opts)
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open = %v; want ErrLocked", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("second Open took %s; want an immediate refusal", d)
		}
		if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := tempDir(t)
	ctx := t.Context()
	a, err := Open(ctx, Options{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, "nodes/n1", rec{V: 1, Name: "n1"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	b, err := Open(ctx, Options{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer b.Close()
	var got rec
	if _, err := b.Get(ctx, "nodes/n1", &got); err != nil || got.Name != "n1" {
		t.Fatalf("after restart: %+v, %v; want n1", got, err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(dir, "etcd"), 0o700}, {filepath.Join(dir, "etcd.sock"), 0o600}, {filepath.Join(dir, "lock"), 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != c.mode {
			t.Errorf("%s mode %v; want %v", c.path, fi.Mode().Perm(), c.mode)
		}
	}
}

func TestExternalPrefixesAreSeparate(t *testing.T) {
	ctx := t.Context()
	b, err := Open(ctx, Options{Endpoints: []string{shared.Endpoint()}, Prefix: "/other"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Prefix() != "/other/" {
		t.Fatalf("Prefix = %q; want /other/", b.Prefix())
	}
	if err := shared.Put(ctx, "sep/x", "from A", 0); err != nil {
		t.Fatal(err)
	}
	defer shared.Delete(ctx, "sep/x")
	if err := b.Put(ctx, "sep/x", "from B", 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "sep/y", "from B", 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    *Store
		want string
		keys int
	}{{shared, "from A", 1}, {b, "from B", 2}} {
		var got string
		if _, err := c.s.Get(ctx, "sep/x", &got); err != nil || got != c.want {
			t.Errorf("%s: sep/x = %q, %v; want %q", c.s.Prefix(), got, err, c.want)
		}
		n := 0
		if err := c.s.List(ctx, "sep/", func(string, int64, []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != c.keys {
			t.Errorf("%s: List sep/ = %d keys; want %d", c.s.Prefix(), n, c.keys)
		}
	}
}

func TestExternalWrongEndpointFailsNamingIt(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	ep := "unix://" + filepath.Join(dir, "nobody.sock")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := Open(ctx, Options{Endpoints: []string{ep}})
	if err == nil || !strings.Contains(err.Error(), ep) {
		t.Fatalf("Open on a dead endpoint = %v; want an error naming %s", err, ep)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Open on a dead endpoint took %s; want the ctx deadline (1 s)", d)
	}
}

// capture is a slog handler that keeps records.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func (c *capture) above(lvl slog.Level) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.recs {
		if r.Level >= lvl {
			s := r.Level.String() + " " + r.Message
			r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
			out = append(out, s)
		}
	}
	return out
}

func TestZapToSlog(t *testing.T) {
	c := &capture{}
	zl := zapLogger(slog.New(c))
	zl.Warn("slow request", zap.String("took", "2s"))
	zl.Error("mux: server closed")
	zl.Info("starting")
	zl.Named("raft").Error("lost leader")
	zl.Debug("apply", zap.String("value", "secret"))
	if len(c.recs) != 4 {
		t.Fatalf("%d records; want 4 (noise and info demoted to DEBUG, etcd's DEBUG dropped)", len(c.recs))
	}
	want := []struct {
		lvl slog.Level
		msg string
	}{{slog.LevelWarn, "slow request"}, {slog.LevelDebug, "mux: server closed"}, {slog.LevelDebug, "starting"}, {slog.LevelError, "lost leader"}}
	for i, w := range want {
		if c.recs[i].Level != w.lvl || c.recs[i].Message != w.msg {
			t.Errorf("record %d = %s %q; want %s %q", i, c.recs[i].Level, c.recs[i].Message, w.lvl, w.msg)
		}
	}
	var took string
	c.recs[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "took" {
			took = a.Value.String()
		}
		return true
	})
	if took != "2s" {
		t.Errorf("warning's took attr = %q; want 2s", took)
	}

	// At INFO, a real start and Close of a member log nothing at WARN or above.
	c = &capture{}
	quiet := slog.New(levelFilter{c, slog.LevelInfo})
	s, err := Open(t.Context(), Options{DataDir: tempDir(t), UnsafeNoFsync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "k", 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := c.above(slog.LevelWarn); len(got) > 0 {
		t.Fatalf("a normal start and Close logged:\n%s", strings.Join(got, "\n"))
	}
}

type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(_ context.Context, l slog.Level) bool { return l >= f.min }
func (f levelFilter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < f.min {
		return nil
	}
	return f.Handler.Handle(ctx, r)
}

// etcd's own DEBUG traces print every value applied; they must never reach
// the director's log, even at DEBUG.
func TestValuesNeverLogged(t *testing.T) {
	c := &capture{}
	ctx := t.Context()
	s, err := Open(ctx, Options{DataDir: tempDir(t), UnsafeNoFsync: true, Logger: slog.New(c)})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3t-value-0123456789abcdef"
	if err := s.Put(ctx, "tokens/x", map[string]string{"hash": secret}, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Txn().IfAbsent("tokens/y").Put("tokens/y", secret, 0).Commit(ctx); err != nil || !ok {
		t.Fatalf("txn = %v, %v", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	all := c.above(slog.LevelDebug)
	if len(all) == 0 {
		t.Fatal("nothing logged at DEBUG: the capture proves nothing")
	}
	for _, line := range all {
		if strings.Contains(line, secret) {
			t.Fatalf("a value was logged: %s", line)
		}
	}
}

// The member opens no peer listener: the process listens on no TCP port
// and on no abstract unix socket (an absolute unix peer URL would be one,
// reachable by anyone in the network namespace), only on etcd.sock.
func TestNoPeerListener(t *testing.T) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" && inodes[fs[9]] { // 0A: LISTEN
				t.Errorf("listening on TCP %s (%s)", fs[1], f)
			}
		}
	}
	b, err := os.ReadFile("/proc/self/net/unix")
	if err != nil {
		t.Skipf("no /proc/self/net/unix: %v", err)
	}
	sock := strings.TrimPrefix(shared.Endpoint(), "unix://")
	seen := false
	for _, line := range strings.Split(string(b), "\n")[1:] {
		fs := strings.Fields(line)
		if len(fs) < 8 || !inodes[fs[6]] || fs[3] != "00010000" { // __SO_ACCEPTCON: listening
			continue
		}
		switch {
		case fs[7] == sock:
			seen = true
		case strings.HasPrefix(fs[7], "@"):
			t.Errorf("listening on abstract unix socket %s", fs[7])
		}
	}
	if !seen {
		t.Errorf("not listening on %s: the scan proves nothing", sock)
	}
}

func TestLongDataDirRefusedBeforeCreatingIt(t *testing.T) {
	dir := filepath.Join(tempDir(t), strings.Repeat("d", 100))
	_, err := Open(t.Context(), Options{DataDir: dir, UnsafeNoFsync: true})
	if err == nil || !strings.Contains(err.Error(), "unix socket limit") {
		t.Fatalf("Open with a %d-byte socket path = %v; want the socket limit named", len(dir)+10, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused data dir was created (stat: %v)", err)
	}
}

// A watch through a member that restarts resumes where it was: nothing
// lost, nothing repeated. It says so: Broken while the member is gone
// (the etcd client retries in silence: only the unanswered progress
// requests tell), Resumed once it is back and caught up. A quiet watch
// whose member answers is never Broken.
func TestWatchResumesAcrossRestart(t *testing.T) {
	dir := tempDir(t)
	ctx := t.Context()
	a, err := Open(ctx, Options{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.Close() }()
	const check = 100 * time.Millisecond
	b, err := Open(ctx, Options{Endpoints: []string{a.Endpoint()}, WatchCheck: check})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ch := b.Watch(ctx, "w/", 0)
	recv := func(what string, within time.Duration) Event {
		t.Helper()
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed waiting for %s", what)
			}
			return e
		case <-time.After(within):
			t.Fatalf("no %s within %s", what, within)
		}
		return Event{}
	}
	// The watch exists once a write made after Watch returns is seen.
	for i := 0; ; i++ {
		if err := a.Put(ctx, "w/0", i, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	if err := a.Put(ctx, "w/1", 1, 0); err != nil {
		t.Fatal(err)
	}
	if e := recv("w/1", 8*time.Second); e.Key != "w/1" {
		t.Fatalf("event %+v, want w/1", e)
	}
	// A watch that starts after the last write (ListRev + 1, as the
	// director's do): etcd answers no progress request for it, and it is
	// not Broken for that.
	qrev, err := b.ListRev(ctx, "q/", func(string, int64, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	qch := b.Watch(ctx, "q/", qrev+1)
	select {
	case e := <-ch:
		t.Fatalf("a quiet watch on a live member sent %+v", e)
	case e := <-qch:
		t.Fatalf("a quiet watch from after the last write sent %+v", e)
	case <-time.After(10 * check):
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if e := recv("Broken", 20*check); !e.Broken || e.Key != "" || e.Err == nil {
		t.Fatalf("with the member gone: event %+v, want Broken with an error", e)
	}
	if a, err = Open(ctx, Options{DataDir: dir, UnsafeNoFsync: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, "w/2", 2, 0); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		e := recv("w/2 and Resumed", 15*time.Second)
		switch {
		case e.Resumed:
			got = append(got, "Resumed")
		case e.Key != "":
			got = append(got, e.Key)
		default:
			t.Fatalf("event %+v after the restart", e)
		}
	}
	if !slices.Contains(got, "w/2") || !slices.Contains(got, "Resumed") {
		t.Fatalf("after the restart: %v, want w/2 and Resumed", got)
	}
	select {
	case e := <-ch:
		t.Fatalf("extra event %+v after the restart", e)
	case <-time.After(10 * check):
	}
}

func TestExternalTLSFilesChecked(t *testing.T) {
	missing := filepath.Join(tempDir(t), "ca.pem")
	_, err := Open(t.Context(), Options{Endpoints: []string{shared.Endpoint()}, CACert: missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open with a missing CA file = %v; want an error naming it", err)
	}
	if _, err := Open(t.Context(), Options{Endpoints: []string{shared.Endpoint()}, Cert: "c.pem"}); err == nil {
		t.Fatal("Open with a cert and no key succeeded")
	}
}

func TestWatchEndsWithTheStore(t *testing.T) {
	s, err := Open(t.Context(), Options{Endpoints: []string{shared.Endpoint()}, Prefix: "/test/watch-close/"})
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(context.Background(), "x/", 0)
	s.Close()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a watch with a live ctx still open 5 s after Close")
	}
}
