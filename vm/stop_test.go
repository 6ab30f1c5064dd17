package vm

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A graceful stop whose ctx ends while the guest is powering off (Ctrl-C,
// a caller giving up) neither quits nor kills QEMU: it returns the
// interruption, and spec.running is already false. Only the timeout
// escalates (review of issue 11, item 1).
func TestPowerOffInterrupted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cancel  bool // cancel the ctx (else a deadline ends it)
		pressed bool
		// the monitor's answer to system_powerdown
		powerdown func(cancel func()) any
	}{
		{name: "cancelled while waiting for the power-off", cancel: true, pressed: true},
		{name: "deadline while waiting for the power-off", pressed: true},
		{name: "cancelled while the button is pressed", cancel: true, powerdown: func(cancel func()) any {
			cancel()
			time.Sleep(100 * time.Millisecond) // the reply comes too late
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _, host := newTestManager(t)
			vm := mustCreate(t, m, kernelVM("deaf", testKernel(t)))
			uid := vm.Metadata.UID
			vm.Spec.Running = true
			if err := m.store.save(vm); err != nil {
				t.Fatal(err)
			}
			q := startFakeQEMU(t, m, host, uid, nil)
			var ctx context.Context
			var cancel context.CancelFunc
			if tt.cancel {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			}
			defer cancel()
			mon := serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, _ json.RawMessage) any {
				switch cmd {
				case "query-status":
					return map[string]any{"status": "running", "running": true}
				case "system_powerdown":
					if tt.powerdown != nil {
						return tt.powerdown(cancel)
					}
					// a deaf guest: the button is pressed, nothing happens
					if tt.cancel {
						time.AfterFunc(300*time.Millisecond, cancel)
					}
				}
				return nil
			}})

			start := time.Now()
			res, err := m.PowerOff(ctx, "deaf", StopOptions{Timeout: 60 * time.Second})
			took := time.Since(start)
			var ie *StopInterruptedError
			if !errors.As(err, &ie) || ie.Pressed != tt.pressed || !errors.Is(err, ctx.Err()) || ctx.Err() == nil {
				t.Fatalf("PowerOff: got %+v, %v; want a StopInterruptedError (pressed %v) wrapping %v", res, err, tt.pressed, ctx.Err())
			}
			if !strings.Contains(err.Error(), `vm "deaf": stop interrupted`) {
				t.Errorf("error %q; want it to say the stop of deaf was interrupted", err)
			}
			if took > 10*time.Second {
				t.Errorf("PowerOff took %v after the interruption", took)
			}
			if !q.alive() {
				t.Errorf("the QEMU was killed by an interrupted stop")
			}
			if got := mon.gotString(); strings.Contains(got, "quit") {
				t.Errorf("QMP commands %s: an interrupted stop sent quit", got)
			}
			back, err := m.store.load(uid)
			if err != nil || back.Spec.Running {
				t.Errorf("after the interrupted stop: spec.running %v (%v); want false (the intent is written)", back.Spec.Running, err)
			}
			if m.livePID(uid) != q.pid {
				t.Errorf("the VM's runtime is gone: livePID %d; want %d", m.livePID(uid), q.pid)
			}
		})
	}
}

// The timeout, not the ctx, escalates: a guest that does not power off in
// time is told to quit.
func TestPowerOffTimeoutQuits(t *testing.T) {
	t.Parallel()
	m, _, host := newTestManager(t)
	vm := mustCreate(t, m, kernelVM("deaf", testKernel(t)))
	uid := vm.Metadata.UID
	q := startFakeQEMU(t, m, host, uid, nil)
	mon := serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, _ json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "quit":
			q.exit()
			return qmpHangUp{}
		}
		return nil
	}})
	res, err := m.PowerOff(context.Background(), "deaf", StopOptions{Timeout: 200 * time.Millisecond})
	if err != nil || res.How != StoppedQuit {
		t.Fatalf("PowerOff: got %+v, %v; want quit", res, err)
	}
	if got, want := mon.gotString(), "query-status,system_powerdown,quit"; got != want {
		t.Errorf("QMP commands %s; want %s", got, want)
	}
}
