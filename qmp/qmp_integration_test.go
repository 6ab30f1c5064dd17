//go:build integration

package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	gqmp "github.com/digitalocean/go-qemu/qmp"
	"github.com/digitalocean/go-qemu/qmp/raw"

	"github.com/virtcon/virtcon/internal/testutil"
)

// startQEMU runs a paused, diskless TCG VM with two QMP sockets (commands
// and events) and kills it when the test ends. It returns the socket paths
// and a channel closed when the process exits. extra is added to QEMU's
// arguments.
func startQEMU(t *testing.T, extra ...string) (cmdSock, eventSock string, exited <-chan struct{}) {
	t.Helper()
	bin := testutil.RequireCommand(t, "qemu-system-x86_64", "apt-get install qemu-system-x86")
	dir := t.TempDir()
	cmdSock = filepath.Join(dir, "qmp.sock")
	eventSock = filepath.Join(dir, "events.sock")
	cmd := exec.Command(bin,
		"-accel", "tcg", "-machine", "q35", "-nodefaults", "-no-user-config",
		"-display", "none", "-S",
		"-qmp", "unix:"+cmdSock+",server=on,wait=off",
		"-qmp", "unix:"+eventSock+",server=on,wait=off",
	)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})

	// QEMU creates the sockets during startup; wait for both to appear.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err1 := os.Stat(cmdSock)
		_, err2 := os.Stat(eventSock)
		if err1 == nil && err2 == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("qemu exited during startup")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("QMP sockets did not appear: %v, %v", err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmdSock, eventSock, done
}

func TestIntegrationQEMU(t *testing.T) {
	cmdSock, eventSock, exited := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := Options{Timeout: 5 * time.Second}

	m, err := Dial(ctx, cmdSock, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer m.Close()
	t.Logf("connected to QEMU %s", m.Greeting().Version)

	events, err := DialEvents(ctx, eventSock, opts)
	if err != nil {
		t.Fatalf("DialEvents: %v", err)
	}
	defer events.Close()

	wantStatus := func(step, want string, running bool) {
		t.Helper()
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatalf("%s: Status: %v", step, err)
		}
		if st.Status != want || st.Running != running {
			t.Errorf("%s: got status %+v; want %q (running=%v)", step, st, want, running)
		}
	}
	wantStatus("started with -S", "prelaunch", false)
	if st, err := raw.NewMonitor(m).QueryStatus(); err != nil || st.Status != raw.RunStatePrelaunch {
		t.Errorf("go-qemu raw QueryStatus: got %+v, %v; want prelaunch", st, err)
	}
	if err := m.Cont(ctx); err != nil {
		t.Fatalf("Cont: %v", err)
	}
	wantStatus("after Cont", "running", true)
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wantStatus("after Stop", "paused", false)

	var schema json.RawMessage
	if err := m.Execute(ctx, "query-qmp-schema", nil, &schema); err != nil {
		t.Fatalf("query-qmp-schema: %v", err)
	}
	if len(schema) <= 64*1024 {
		t.Errorf("query-qmp-schema: got %d bytes; want more than 64 KiB", len(schema))
	}
	t.Logf("query-qmp-schema: %d bytes", len(schema))

	cpus, err := m.QueryCPUsFast(ctx)
	if err != nil {
		t.Fatalf("QueryCPUsFast: %v", err)
	}
	if len(cpus) != 1 || cpus[0].Target != "x86_64" || cpus[0].ThreadID == 0 {
		t.Errorf("QueryCPUsFast: got %+v; want one x86_64 vCPU with a thread id", cpus)
	}
	if enabled, _, err := m.QueryKVM(ctx); err != nil || enabled {
		t.Errorf("QueryKVM: got enabled=%v, %v; want false under TCG", enabled, err)
	}
	if v, err := m.Version(ctx); err != nil || v.QEMU.Major == 0 {
		t.Errorf("Version: got %v, %v; want a version", v, err)
	}
	var cerr *CommandError
	if err := m.Execute(ctx, "query-cpus", nil, nil); !errors.As(err, &cerr) || cerr.Class != "CommandNotFound" {
		t.Errorf("query-cpus: got %v; want CommandNotFound (removed in QEMU 6.0)", err)
	}

	// Options.Timeout only applies when ctx has no deadline.
	start := time.Now()
	_, err = Dial(context.Background(), cmdSock, Options{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrBusy) {
		t.Errorf("second Dial: got %v; want ErrBusy", err)
	}
	t.Logf("second Dial refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	// The second client's connection must not have disturbed the first.
	wantStatus("after second Dial", "paused", false)

	var got []string
	for _, want := range []string{"RESUME", "STOP"} {
		select {
		case e, ok := <-events.C():
			if !ok {
				t.Fatalf("event stream ended: %v", events.Err())
			}
			got = append(got, e.Event)
			if e.Event != want {
				t.Errorf("event: got %s; want %s (so far %v)", e.Event, want, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiting for %s: got only %v", want, got)
		}
	}

	if err := m.Quit(ctx); err != nil {
		t.Errorf("Quit: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("qemu still running 10s after quit")
	}
	// SHUTDOWN arrives on the event socket, then the stream ends.
	var last gqmp.Event
	for e := range events.C() {
		last = e
	}
	if last.Event != "SHUTDOWN" {
		t.Errorf("last event: got %q; want SHUTDOWN", last.Event)
	}
	if err := events.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("event stream after quit: Err() = %v; want ErrClosed", err)
	}
}
