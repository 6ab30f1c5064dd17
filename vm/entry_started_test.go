package vm

import (
	"context"
	"testing"
	"time"
)

// A VM's entry carries its last start time (status.startedAt, kept by a
// stop): the host boot tells a stale shutdown record by it.
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
	got.Status.StartedAt, got.Status.Phase = &at, PhaseStopped
	if err := m.store.save(got); err != nil {
		t.Fatal(err)
	}
	if es, err = m.List(ctx); err != nil || !es[0].StartedAt.Equal(at) {
		t.Errorf("List: StartedAt %v (%v); want %v", es[0].StartedAt, err, at)
	}
	if e, err := m.Peek(ctx, v.Metadata.UID); err != nil || !e.StartedAt.Equal(at) {
		t.Errorf("Peek: %+v, %v; want StartedAt %v", e, err, at)
	}
}
