package director_test

import (
	"context"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
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

// A task's status that arrives while etcd does not answer is kept by the
// session's writer and stored once etcd is back, without the agent
// reconnecting: dropped, the task would show Running until the node
// registered again (found by dirload -mode resync, where inventory
// writes under a loaded etcd were lost the same way).
func TestStatusWrittenAfterOutage(t *testing.T) {
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
		o.Etcd.RequestTimeout = 500 * time.Millisecond
	})
	a := newTaskAgent(t, h, allKinds...)
	task := startTask("web")
	createTask(t, h, a.node, task)
	if got := a.next().GetTask(); got.GetId() != task.GetId() {
		t.Fatalf("agent got %v, want the task", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: running})
	waitPhase(t, h, task.GetId(), running)

	if err := member.Close(); err != nil {
		t.Fatal(err)
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: succeeded})
	time.Sleep(1500 * time.Millisecond) // at least one failed write
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if member, err = etcdstore.Open(ctx, etcdstore.Options{DataDir: dir, UnsafeNoFsync: true}); err != nil {
		t.Fatal(err)
	}
	// GetTask itself is Unavailable until the client reconnects
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := h.Admin.GetTask(ctx, connect.NewRequest(&directorv1.GetTaskRequest{Id: task.GetId()}))
		if err == nil && resp.Msg.GetTask().GetPhase() == succeeded {
			return
		}
		if err == nil && resp.Msg.GetTask().GetPhase() != running {
			t.Fatalf("after the outage: %v, want Running then Succeeded", resp.Msg.GetTask())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status sent during the outage was not stored 20 s after etcd came back (last: %v, %v)", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
