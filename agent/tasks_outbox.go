package agent

import (
	"sync"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"google.golang.org/protobuf/proto"
)

// outbox holds what goes to the director besides the session's own
// messages: task statuses, task data, inventories. The session loop sends
// its content when ready fires; between sessions it keeps it. Statuses are
// coalesced per task (the newest replaces one not yet sent, taking over
// its log lines), so the outbox stays bounded by the tasks alive while no
// session is up and nothing terminal is ever dropped. Safe for concurrent
// use.
type outbox struct {
	mu    sync.Mutex
	q     []*directorv1.SessionRequest
	ready chan struct{} // cap 1: something was added
}

func newOutbox() *outbox { return &outbox{ready: make(chan struct{}, 1)} }

func (o *outbox) signal() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// status queues st, replacing an unsent status of the same task.
func (o *outbox) status(st *directorv1.TaskStatus) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, m := range o.q {
		prev := m.GetTaskStatus()
		if prev == nil || prev.GetTaskId() != st.GetTaskId() {
			continue
		}
		if prev.GetSeq() > st.GetSeq() {
			return // a resend of an older status: the newer one is queued
		}
		if prev.GetSeq() < st.GetSeq() && len(prev.GetLog()) > 0 {
			st = proto.CloneOf(st)
			st.Log = capLines(append(append([]string(nil), prev.GetLog()...), st.GetLog()...))
		}
		o.q[i] = &directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: st}}
		o.signal()
		return
	}
	o.q = append(o.q, &directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: st}})
	o.signal()
}

// push queues m as it is.
func (o *outbox) push(m *directorv1.SessionRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.q = append(o.q, m)
	o.signal()
}

// take returns what is queued and empties the outbox.
func (o *outbox) take() []*directorv1.SessionRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.q
	o.q = nil
	return q
}

// dropInventory removes queued inventories and deltas: at a new session
// the director asks for a full one (Resync), which supersedes them.
func (o *outbox) dropInventory() {
	o.mu.Lock()
	defer o.mu.Unlock()
	kept := o.q[:0]
	for _, m := range o.q {
		if m.GetInventory() == nil && m.GetInventoryDelta() == nil {
			kept = append(kept, m)
		}
	}
	clear(o.q[len(kept):])
	o.q = kept
}

// capLines keeps the newest maxLogLines lines.
func capLines(lines []string) []string {
	if len(lines) > maxLogLines {
		lines = lines[len(lines)-maxLogLines:]
	}
	return lines
}
