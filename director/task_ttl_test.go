package director_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
)

// TestTaskRecordsOutliveDeadline: with a retention shorter than a task's
// deadline (--task-retention 1h, a pull's default deadline is 2 h), the
// task's records are kept until its deadline has passed, through a status
// write too, and its id record as long as its ended records. Before,
// every key lived the retention only: a pending task of an offline node,
// or a running one silent for an hour, vanished (never NOT_DELIVERED, its
// result dropped as "a task not stored here").
func TestTaskRecordsOutliveDeadline(t *testing.T) {
	h := directortest.Start(t, func(o *director.Options) { o.TaskRetention = time.Hour })
	a := newTaskAgent(t, h, allKinds...)
	const deadline = 3 * time.Hour
	task := &directorv1.Task{Id: uuid.NewString(), DeadlineInMs: deadline.Milliseconds(),
		Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: "http://127.0.0.1:1/x.img", Name: "x"}}}
	createTask(t, h, a.node, task)
	keys := map[string]string{
		"task":   "tasks/" + a.node + "/" + task.GetId(),
		"status": "taskstatus/" + a.node + "/" + task.GetId(),
		"id":     "taskids/" + task.GetId(),
	}
	ttl := func(key string) time.Duration {
		t.Helper()
		s := h.Store(t)
		defer s.Close()
		ctx := context.Background()
		resp, err := s.Client().Get(ctx, s.Prefix()+key)
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("get %s: %v (%d keys)", key, err, len(resp.Kvs))
		}
		l, err := s.Client().TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
		if err != nil {
			t.Fatalf("lease of %s: %v", key, err)
		}
		return time.Duration(l.TTL) * time.Second
	}
	for what, key := range keys {
		if got := ttl(key); got < deadline {
			t.Errorf("%s record %s: lives %s; want at least the deadline %s", what, key, got, deadline)
		}
	}
	if got := ttl(keys["id"]); got < deadline+time.Hour {
		t.Errorf("id record: lives %s; want the deadline and the retention (%s)", got, deadline+time.Hour)
	}
	// a status on the way keeps the status record that long too
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED})
	waitPhase(t, h, task.GetId(), directorv1.TaskPhase_TASK_PHASE_QUEUED)
	if got := ttl(keys["status"]); got < deadline-time.Minute {
		t.Errorf("status record after a status: lives %s; want about the deadline %s", got, deadline)
	}
}
