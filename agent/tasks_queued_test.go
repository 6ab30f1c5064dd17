package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

// TestQueuedTaskEndsAtOnce: a task waiting for a worker that is
// cancelled, or whose deadline passes, ends then (CANCELLED,
// DEADLINE_EXCEEDED) while every worker is still busy. Before, it stayed
// QUEUED until a worker was free, which for pulls or stops waiting on a
// guest could be hours.
func TestQueuedTaskEndsAtOnce(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.Error(w, "gone", http.StatusGone)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	var busy []string
	for i := range taskWorkers {
		id := newID()
		busy = append(busy, id)
		f.sendTask(t, pullTask(id, srv.URL+"/x", "busy"+string(rune('a'+i)), "", 10*time.Minute))
	}
	for _, id := range busy {
		f.waitPhase(t, id, directorv1.TaskPhase_TASK_PHASE_RUNNING)
	}
	cancelled, late := newID(), newID()
	f.sendTask(t, pullTask(cancelled, srv.URL+"/x", "queued1", "", 10*time.Minute))
	f.sendTask(t, pullTask(late, srv.URL+"/x", "queued2", "", 500*time.Millisecond))
	f.waitPhase(t, cancelled, directorv1.TaskPhase_TASK_PHASE_QUEUED)
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_CancelTask{CancelTask: &directorv1.CancelTask{TaskId: cancelled}}})
	if st := f.waitTerminal(t, cancelled); st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_CANCELLED {
		t.Errorf("queued task cancelled: %v; want CANCELLED", st)
	}
	if st := f.waitTerminal(t, late); reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_DEADLINE_EXCEEDED {
		t.Errorf("queued task past its deadline: %v; want FAILED DEADLINE_EXCEEDED", st)
	}
	for _, id := range busy {
		if s := f.of(id); terminalPhase(s[len(s)-1].GetPhase()) {
			t.Fatalf("a busy task ended (%v): the test proves nothing", s)
		}
	}
	for _, id := range []string{cancelled, late} {
		for _, s := range f.of(id) {
			if s.GetPhase() == directorv1.TaskPhase_TASK_PHASE_RUNNING {
				t.Errorf("task %s ended while queued but also ran: %v", id, f.of(id))
			}
		}
	}
}
