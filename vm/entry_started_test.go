package vm

import (
	"context"
	"testing"
	"time"
)

// A VM's entry carries its last start time (status.startedAt, kept by a
// stop), by which the host boot tells a stale shutdown record, and
// spec.running, by which it tells a Saved VM to resume.
func TestEntryStartedAt(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	v := mustCreate(t, m, kernelVM("web", testKernel(t)))
	es, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !es[0].StartedAt.IsZero() {
		t.Errorf("a VM never started lists StartedAt %v; want zero", es[0].StartedAt)
	}
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	got, err := m.store.load(v.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	if es[0].SpecRunning {
		t.Error("a VM never started lists SpecRunning")
	}
	got.Status.StartedAt, got.Status.Phase, got.Spec.Running = &at, PhaseStopped, true
	if err := m.store.save(got); err != nil {
		t.Fatal(err)
	}
	if es, err = m.List(ctx); err != nil || !es[0].StartedAt.Equal(at) || !es[0].SpecRunning {
		t.Errorf("List: StartedAt %v, SpecRunning %v (%v); want %v, true", es[0].StartedAt, es[0].SpecRunning, err, at)
	}
	if e, err := m.Peek(ctx, v.Metadata.UID); err != nil || !e.StartedAt.Equal(at) || !e.SpecRunning {
		t.Errorf("Peek: %+v, %v; want StartedAt %v, SpecRunning", e, err, at)
	}
}
