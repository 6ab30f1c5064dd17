package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// eventServer is a QMP socket that, to each client in turn (one at a
// time, as QEMU serves a monitor), greets, takes qmp_capabilities and
// sends events, then hangs up (QEMU exiting) or holds the connection.
type eventServer struct {
	events []string
	hold   bool // keep the client connected after the events
	mu     sync.Mutex
	served int
}

func serveEvents(t *testing.T, path string, s *eventServer) *eventServer {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
			s.serve(c)
		}
	}()
	return s
}

func (s *eventServer) serve(c net.Conn) {
	enc := json.NewEncoder(c)
	enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{"qemu": map[string]int{"major": 7, "minor": 2, "micro": 0}}, "capabilities": []string{}}})
	sc := bufio.NewScanner(c)
	if !sc.Scan() {
		c.Close()
		return
	}
	var req struct {
		ID any `json:"id"`
	}
	json.Unmarshal(sc.Bytes(), &req)
	enc.Encode(map[string]any{"return": map[string]any{}, "id": req.ID})
	s.mu.Lock()
	s.served++
	s.mu.Unlock()
	for i, e := range s.events {
		enc.Encode(map[string]any{"event": e, "data": map[string]any{"n": i}, "timestamp": map[string]int64{"seconds": 1764630000 + int64(i), "microseconds": 250000}})
	}
	if s.hold {
		for sc.Scan() {
		}
	}
	c.Close()
}

func TestEvents(t *testing.T) {
	tests := []struct {
		name string
		// which sockets exist: a server, or held by another reader
		watch, events string // "serve", "held", "" (absent)
		want          []string
		wantErr       error
	}{
		{"the watch socket", "serve", "serve", []string{"RESET", "SHUTDOWN"}, nil},
		{"watch socket held: the events socket", "held", "serve", []string{"RESET", "SHUTDOWN"}, nil},
		{"a VM started before the watch socket", "", "serve", []string{"RESET", "SHUTDOWN"}, nil},
		{"both held", "held", "held", nil, ErrEventsBusy},
		// QEMU killed -9 sends no SHUTDOWN: the stream just ends
		{"ended without SHUTDOWN", "serve", "serve", []string{"RESET"}, ErrQEMUEnded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, host := newTestManager(t)
			v := mustCreate(t, m, kernelVM("web", testKernel(t)))
			uid := v.Metadata.UID
			startFakeQEMU(t, m, host, uid, nil)
			for sock, how := range map[string]string{watchSockName: tt.watch, evtSockName: tt.events} {
				path := m.runPath(uid, sock)
				switch how {
				case "serve":
					serveEvents(t, path, &eventServer{events: tt.want})
				case "held":
					serveEvents(t, path, &eventServer{hold: true})
					// the other reader, connected first
					o := FollowOptions{DialTimeout: time.Second}
					connected := make(chan struct{})
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan struct{})
					go func() {
						defer close(done)
						o.Connected = func() { close(connected) }
						FollowEvents(ctx, path, uid, "web", o, func(Event) {})
					}()
					t.Cleanup(func() { cancel(); <-done })
					<-connected
				}
			}
			var got []Event
			var ready []string
			err := m.Events(context.Background(), []string{"web"}, EventsOptions{Ready: func(n []string) { ready = n }}, func(e Event) { got = append(got, e) })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Events: %v; want %v", err, tt.wantErr)
			}
			if errors.Is(err, ErrQEMUEnded) && !strings.Contains(err.Error(), `vm "web": events: QEMU ended without SHUTDOWN (pid `) {
				t.Errorf("Events: %q; want it to name the VM and its QEMU's pid", err)
			}
			if tt.wantErr != nil && tt.want == nil {
				return
			}
			if len(ready) != 1 || ready[0] != "web" {
				t.Errorf("Ready(%v); want [web]", ready)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("events %+v; want %v", got, tt.want)
			}
			for i, e := range got {
				want := time.Unix(1764630000+int64(i), 250000000).UTC()
				if e.Event != tt.want[i] || e.UID != uid || e.Name != "web" || !e.At.Equal(want) || e.Data["n"] != float64(i) {
					t.Errorf("event %d = %+v; want %s of web at %s (QEMU's timestamp)", i, e, tt.want[i], want)
				}
			}
		})
	}
}

func TestEventsNotRunning(t *testing.T) {
	m, _, _ := newTestManager(t)
	mustCreate(t, m, kernelVM("off", testKernel(t)))
	if err := m.Events(context.Background(), []string{"off"}, EventsOptions{}, func(Event) {}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Events of a stopped VM: %v; want ErrNotRunning", err)
	}
	// all VMs, none running: nothing to follow, no error
	var ready []string
	called := false
	err := m.Events(context.Background(), nil, EventsOptions{Ready: func(n []string) { ready, called = n, true }}, func(Event) {})
	if err != nil || !called || len(ready) != 0 {
		t.Errorf("Events of no running VM: %v, ready %v (called %v); want nil, called with none", err, ready, called)
	}
}

// Following two VMs, one whose QEMU ends without SHUTDOWN does not end
// the other's events: they are all delivered, and the error comes once
// both are done.
func TestEventsOneQEMUEndedOthersGoOn(t *testing.T) {
	m, _, host := newTestManager(t)
	serve := map[string][]string{"a": {"RESET"}, "b": {"RESET", "STOP", "RESUME", "STOP", "RESUME", "SHUTDOWN"}}
	for _, name := range []string{"a", "b"} {
		v := mustCreate(t, m, kernelVM(name, testKernel(t)))
		startFakeQEMU(t, m, host, v.Metadata.UID, nil)
		serveEvents(t, m.runPath(v.Metadata.UID, watchSockName), &eventServer{events: serve[name]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string][]string{}
	err := m.Events(ctx, nil, EventsOptions{}, func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		got[e.Name] = append(got[e.Name], e.Event)
	})
	if ctx.Err() != nil {
		t.Fatalf("Events did not return when both streams ended: %v", err)
	}
	if !errors.Is(err, ErrQEMUEnded) || !strings.Contains(err.Error(), `vm "a"`) {
		t.Errorf("Events: %v; want a's QEMU ended without SHUTDOWN", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for name, want := range serve {
		if strings.Join(got[name], ",") != strings.Join(want, ",") {
			t.Errorf("%s's events: %v; want %v (all delivered)", name, got[name], want)
		}
	}
}
