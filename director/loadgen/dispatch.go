package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
)

// DispatchResult is one task's timing.
type DispatchResult struct {
	// Latency runs from the CreateTask call to the first status past
	// Pending that WatchTask delivered (the agent's Queued).
	Latency time.Duration
	// DispatchUs is the director's own figure: creation to the agent's
	// first status.
	DispatchUs int64
}

// Dispatch runs n start-vm tasks over nodes in turn, inFlight at a time:
// for each a client UUID, WatchTask opened first (its headers back), then
// CreateTask, then the watch read until the task is past Pending. It
// stops at the first failure.
func Dispatch(ctx context.Context, admin directorv1connect.AdminServiceClient, nodes []string, n, inFlight int) ([]DispatchResult, error) {
	if len(nodes) == 0 {
		return nil, errors.New("loadgen: dispatch: no nodes")
	}
	inFlight = max(inFlight, 1)
	out := make([]DispatchResult, n)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := dispatchOne(ctx, admin, nodes[i%len(nodes)], fmt.Sprintf("vm-%d", i))
			if err != nil {
				cancel(fmt.Errorf("task %d: %w", i, err))
				return
			}
			out[i] = r
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

func dispatchOne(ctx context.Context, admin directorv1connect.AdminServiceClient, node, vm string) (DispatchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	task := &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_StartVm{StartVm: &directorv1.StartVM{Vm: vm}}}
	w, err := admin.WatchTask(ctx, connect.NewRequest(&directorv1.WatchTaskRequest{Id: task.GetId()}))
	if err != nil {
		return DispatchResult{}, fmt.Errorf("watch: %w", err)
	}
	defer w.Close()
	t0 := time.Now()
	if _, err := admin.CreateTask(ctx, connect.NewRequest(&directorv1.CreateTaskRequest{Node: node, Task: task})); err != nil {
		return DispatchResult{}, fmt.Errorf("create: %w", err)
	}
	for w.Receive() {
		ti := w.Msg()
		if ti.GetPhase() > directorv1.TaskPhase_TASK_PHASE_PENDING {
			return DispatchResult{Latency: time.Since(t0), DispatchUs: ti.GetDispatchUs()}, nil
		}
	}
	return DispatchResult{}, fmt.Errorf("watch ended before the agent's first status: %v", w.Err())
}
