package director_test

import (
	"context"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/director/etcdstore"
)

// While the director cannot reach etcd its revocation list is not
// current (a revocation made on another replica would not be seen):
// node requests are refused with Unavailable, and accepted again once
// the watch resumed. Before, the watch resumed in silence with its
// channel open and the director kept accepting certificates.
func TestEtcdOutageFailsClosed(t *testing.T) {
	dir, err := os.MkdirTemp("", "vdo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	member, err := etcdstore.Open(t.Context(), etcdstore.Options{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { member.Close() }) // after the director's Stop
	h := directortest.Start(t, func(o *director.Options) {
		o.Etcd.Endpoints = []string{member.Endpoint()}
		o.Etcd.WatchCheck = 100 * time.Millisecond
	})
	_, cert := h.Enroll(t, nil)
	if code := probe(t, h, cert); code != connect.CodeInvalidArgument {
		t.Fatalf("probe with etcd up: %v, want InvalidArgument (accepted)", code)
	}
	waitProbe := func(want connect.Code, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			code := probe(t, h, cert)
			if code == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("probe: %v after %s, want %v", code, within, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := member.Close(); err != nil {
		t.Fatal(err)
	}
	waitProbe(connect.CodeUnavailable, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if member, err = etcdstore.Open(ctx, etcdstore.Options{DataDir: dir, UnsafeNoFsync: true}); err != nil {
		t.Fatal(err)
	}
	waitProbe(connect.CodeInvalidArgument, 20*time.Second)
}
