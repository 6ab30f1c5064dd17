package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qemu"
	gqmp "github.com/digitalocean/go-qemu/qmp"
	"github.com/digitalocean/go-qemu/qmp/raw"
)

// slack is how much later than its deadline a call may return.
const slack = 750 * time.Millisecond

func dialT(t *testing.T, path string, opts Options) *Monitor {
	t.Helper()
	m, err := Dial(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func assertIs(t *testing.T, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("got error %v; want one wrapping %q", err, target)
		}
	}
}

func TestDialErrors(t *testing.T) {
	const timeout = 200 * time.Millisecond
	tests := []struct {
		name    string
		path    func(t *testing.T) string
		wantIs  []error
		wantCmd *CommandError
	}{
		{
			name:   "no socket file",
			path:   func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing.sock") },
			wantIs: []error{ErrUnavailable},
		},
		{
			name: "stale socket, connection refused",
			path: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "stale.sock")
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				ln.SetUnlinkOnClose(false)
				ln.Close()
				return path
			},
			wantIs: []error{ErrUnavailable},
		},
		{
			name:   "accepts but never greets",
			path:   func(t *testing.T) string { return startFake(t, (*fakeConn).waitClosed).path },
			wantIs: []error{ErrBusy},
		},
		{
			name: "greets then ignores qmp_capabilities",
			path: func(t *testing.T) string {
				return startFake(t, func(c *fakeConn) { c.greet(); c.waitClosed() }).path
			},
			wantIs: []error{ErrTimeout, context.DeadlineExceeded},
		},
		{
			name:   "hangs up before greeting",
			path:   func(t *testing.T) string { return startFake(t, func(*fakeConn) {}).path },
			wantIs: []error{ErrClosed},
		},
		{
			name: "hangs up after greeting",
			path: func(t *testing.T) string {
				return startFake(t, func(c *fakeConn) { c.greet(); c.read() }).path
			},
			wantIs: []error{ErrClosed},
		},
		{
			name: "qmp_capabilities rejected",
			path: func(t *testing.T) string {
				return startFake(t, func(c *fakeConn) {
					c.greet()
					cmd, _ := c.read()
					c.replyErr(cmd, "CommandNotFound", "Capabilities negotiation is already complete")
					c.waitClosed()
				}).path
			},
			wantCmd: &CommandError{Command: "qmp_capabilities", Class: "CommandNotFound", Desc: "Capabilities negotiation is already complete"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := tt.path(t)
			start := time.Now()
			m, err := Dial(context.Background(), path, Options{Timeout: timeout})
			elapsed := time.Since(start)
			if err == nil {
				m.Close()
				t.Fatalf("Dial: got nil error; want one")
			}
			assertIs(t, err, tt.wantIs...)
			if tt.wantCmd != nil {
				var cerr *CommandError
				if !errors.As(err, &cerr) {
					t.Fatalf("got error %v; want a *CommandError", err)
				}
				if *cerr != *tt.wantCmd {
					t.Errorf("got %+v; want %+v", *cerr, *tt.wantCmd)
				}
			}
			if elapsed > timeout+slack {
				t.Errorf("Dial took %v; want at most about %v", elapsed, timeout)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the socket %s", err, path)
			}
		})
	}
}

func TestDialFullQueueIsBusy(t *testing.T) {
	// A listener that never accepts, with the smallest backlog, like a QEMU
	// monitor whose one client slot and queue are taken.
	path := filepath.Join(t.TempDir(), "full.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })

	// Fill the queue until the kernel refuses with EAGAIN.
	full := false
	for range 16 {
		c, err := net.Dial("unix", path)
		if errors.Is(err, syscall.EAGAIN) {
			full = true
			break
		}
		if err != nil {
			t.Fatalf("filling the queue: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
	if !full {
		t.Skip("kernel never reported a full unix socket queue")
	}
	start := time.Now()
	_, err = Dial(context.Background(), path, Options{Timeout: 5 * time.Second})
	assertIs(t, err, ErrBusy)
	if d := time.Since(start); d > slack {
		t.Errorf("Dial took %v; want an immediate ErrBusy", d)
	}
}

func TestExecuteWithExpiredContextKeepsMonitor(t *testing.T) {
	f := startFake(t, replies(map[string]any{"query-status": map[string]any{"status": "running", "running": true}}))
	m := dialT(t, f.path, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Status(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Status with a cancelled ctx: got %v; want context.Canceled", err)
	}
	if m.Closed() {
		t.Error("Closed() after a command with an expired ctx: got true; want false (nothing was sent)")
	}
	if _, err := m.Status(context.Background()); err != nil {
		t.Errorf("Status afterwards: got %v; want the monitor still usable", err)
	}
}

func TestDialHonoursContext(t *testing.T) {
	f := startFake(t, (*fakeConn).waitClosed)

	t.Run("deadline shorter than Options.Timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Dial(ctx, f.path, Options{Timeout: time.Minute})
		assertIs(t, err, ErrBusy)
		if d := time.Since(start); d > 100*time.Millisecond+slack {
			t.Errorf("Dial took %v; want about 100ms", d)
		}
		if !strings.Contains(fmt.Sprint(err), "another client may hold the socket") {
			t.Errorf("got %q; want it to explain the busy socket", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := Dial(ctx, f.path, Options{Timeout: time.Minute})
		assertIs(t, err, context.Canceled)
		if d := time.Since(start); d > slack {
			t.Errorf("Dial took %v after cancel; want it to return promptly", d)
		}
	})
}

func TestGreeting(t *testing.T) {
	f := startFake(t, replies(nil))
	m := dialT(t, f.path, Options{})
	g := m.Greeting()
	if got, want := g.Version.String(), "7.2.0"; got != want {
		t.Errorf("Greeting().Version = %s; want %s", got, want)
	}
	if got, want := strings.Join(g.Capabilities, ","), "oob"; got != want {
		t.Errorf("Greeting().Capabilities = %s; want %s", got, want)
	}
	if err := m.Connect(); err != nil {
		t.Errorf("Connect on an open monitor: %v", err)
	}
}

func TestExecuteNoReplyTimesOutAndCloses(t *testing.T) {
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		c.read()
		c.waitClosed()
	})
	m := dialT(t, f.path, Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Status(ctx)
	if d := time.Since(start); d > 150*time.Millisecond+slack {
		t.Errorf("Status took %v; want about 150ms", d)
	}
	assertIs(t, err, ErrTimeout, context.DeadlineExceeded)

	// The stream may be out of sync: the monitor must refuse further use.
	if !m.Closed() {
		t.Error("Closed() after a command that missed its deadline: got false; want true")
	}
	err = m.Execute(context.Background(), "query-version", nil, nil)
	assertIs(t, err, ErrClosed)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("later command: got %v; want only ErrClosed, not a deadline", err)
	}
	if err := m.Connect(); !errors.Is(err, ErrClosed) {
		t.Errorf("Connect after timeout: got %v; want ErrClosed", err)
	}
}

func TestExecuteDefaultTimeout(t *testing.T) {
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		c.read()
		c.waitClosed()
	})
	m := dialT(t, f.path, Options{Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := m.Execute(context.Background(), "query-status", nil, nil)
	assertIs(t, err, ErrTimeout, context.DeadlineExceeded)
	if d := time.Since(start); d > 100*time.Millisecond+slack {
		t.Errorf("Execute without deadline took %v; want Options.Timeout (100ms)", d)
	}
}

func TestExecuteEOFMidCommand(t *testing.T) {
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		c.read() // and hang up without replying
	})
	m := dialT(t, f.path, Options{Timeout: 5 * time.Second})
	start := time.Now()
	_, err := m.Status(context.Background())
	assertIs(t, err, ErrClosed)
	if errors.Is(err, ErrTimeout) {
		t.Errorf("got %v; want ErrClosed, not ErrTimeout", err)
	}
	if d := time.Since(start); d > slack {
		t.Errorf("Status took %v; want it to fail as soon as the connection drops", d)
	}
}

func TestCommandError(t *testing.T) {
	tests := []struct {
		class, desc string
	}{
		{"GenericError", "Invalid parameter 'x'"},
		{"CommandNotFound", "The command query-cpus has not been found"},
		{"DeviceNotFound", "Device 'net0' not found"},
		{"KVMMissingCap", "Using KVM without x is not supported"},
	}
	table := map[string]any{}
	for i, tt := range tests {
		table[fmt.Sprintf("cmd-%d", i)] = &CommandError{Class: tt.class, Desc: tt.desc}
	}
	f := startFake(t, replies(table))
	m := dialT(t, f.path, Options{})
	for i, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			cmd := fmt.Sprintf("cmd-%d", i)
			err := m.Execute(context.Background(), cmd, map[string]string{"secret": "hunter2"}, nil)
			var cerr *CommandError
			if !errors.As(err, &cerr) {
				t.Fatalf("got error %v; want a *CommandError", err)
			}
			want := CommandError{Command: cmd, Class: tt.class, Desc: tt.desc}
			if *cerr != want {
				t.Errorf("got %+v; want %+v", *cerr, want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q leaks argument values", err)
			}
		})
	}
	// A QEMU error does not close the monitor.
	if err := m.Connect(); err != nil {
		t.Errorf("Connect after command errors: %v", err)
	}
}

func TestEventsDoNotBlockReplies(t *testing.T) {
	const buffer = 4
	tests := []struct {
		name      string
		events    int
		subscribe bool // subscribe with Events but never read
	}{
		{"few events, no subscriber", 3, false},
		{"many events, no subscriber", 50 * buffer, false},
		{"few events, idle subscriber", 3, true},
		{"many events, idle subscriber", 50 * buffer, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, func(c *fakeConn) {
				if c.negotiate() != nil {
					return
				}
				for {
					cmd, err := c.read()
					if err != nil {
						return
					}
					for i := range tt.events {
						c.event("BLOCK_IO_ERROR", map[string]any{"n": i})
					}
					c.reply(cmd, map[string]any{"status": "running", "running": true})
					c.event("RESUME", nil) // after the reply, before the next command
				}
			})
			m := dialT(t, f.path, Options{EventBuffer: buffer})
			var ch <-chan gqmp.Event
			if tt.subscribe {
				var err error
				if ch, err = m.Events(context.Background()); err != nil {
					t.Fatalf("Events: %v", err)
				}
			}
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				st, err := m.Status(ctx)
				cancel()
				if err != nil {
					t.Fatalf("Status #%d: %v", i, err)
				}
				if !st.Running {
					t.Errorf("Status #%d: got %+v; want running", i, st)
				}
			}
			if !tt.subscribe {
				return
			}
			// Three rounds delivered 3*(events+1) events; the reader has seen
			// at least all events before the last reply.
			sent := 2*(tt.events+1) + tt.events
			if got := len(ch); got != min(buffer, sent) {
				t.Errorf("buffered events: got %d; want %d", got, min(buffer, sent))
			}
			if got, want := m.DroppedEvents(), uint64(max(0, sent-buffer)); got < want {
				t.Errorf("DroppedEvents() = %d; want at least %d", got, want)
			}
			// Drop-oldest: what is left is the newest, still in order.
			last := -1
			for range len(ch) {
				e := <-ch
				if e.Event != "BLOCK_IO_ERROR" {
					continue
				}
				n := int(e.Data["n"].(float64))
				if n <= last && last != tt.events-1 {
					t.Errorf("event n=%d after n=%d; want increasing", n, last)
				}
				last = n
			}
		})
	}
}

func TestLargeReply(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 200*1024/16) // 200 KiB
	f := startFake(t, replies(map[string]any{"query-qmp-schema": big}))
	m := dialT(t, f.path, Options{})

	var got string
	if err := m.Execute(context.Background(), "query-qmp-schema", nil, &got); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got != big {
		t.Errorf("got %d bytes; want the %d bytes sent, intact", len(got), len(big))
	}

	line, err := m.Run([]byte(`{"execute":"query-qmp-schema"}`))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var rep struct {
		Return string `json:"return"`
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatalf("Run reply %.100q: %v", line, err)
	}
	if rep.Return != big {
		t.Errorf("Run: got %d bytes; want %d", len(rep.Return), len(big))
	}
}

func TestSecondClientIsBusy(t *testing.T) {
	f := startFake(t, replies(map[string]any{"query-status": map[string]any{"status": "running", "running": true}}))
	first := dialT(t, f.path, Options{})

	_, err := Dial(context.Background(), f.path, Options{Timeout: 200 * time.Millisecond})
	assertIs(t, err, ErrBusy)

	// The first client is unaffected, and once it leaves the socket is free.
	if _, err := first.Status(context.Background()); err != nil {
		t.Fatalf("first client Status: %v", err)
	}
	first.Close()
	third := dialT(t, f.path, Options{})
	if _, err := third.Status(context.Background()); err != nil {
		t.Errorf("Status after the first client left: %v", err)
	}
}

func TestConcurrentExecuteMatchesByID(t *testing.T) {
	const n = 20
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		cmds := make([]fakeCmd, 0, n)
		for range n {
			cmd, err := c.read()
			if err != nil {
				return
			}
			cmds = append(cmds, cmd)
		}
		for i := len(cmds) - 1; i >= 0; i-- { // answer in reverse order
			var args struct{ N int }
			json.Unmarshal(cmds[i].Arguments, &args)
			c.reply(cmds[i], args.N*10)
		}
		c.waitClosed()
	})
	m := dialT(t, f.path, Options{Timeout: 5 * time.Second})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var got int
			if err := m.Execute(context.Background(), "echo", map[string]int{"n": i}, &got); err != nil {
				t.Errorf("Execute n=%d: %v", i, err)
				return
			}
			if got != i*10 {
				t.Errorf("Execute n=%d: got %d; want %d", i, got, i*10)
			}
		})
	}
	wg.Wait()
}

func TestQuit(t *testing.T) {
	tests := []struct {
		name    string
		server  func(c *fakeConn, cmd fakeCmd)
		wantErr error
	}{
		{"reply then hang up", func(c *fakeConn, cmd fakeCmd) { c.reply(cmd, nil) }, nil},
		{"hang up before reply", func(*fakeConn, fakeCmd) {}, nil},
		{"SHUTDOWN event, reply, hang up", func(c *fakeConn, cmd fakeCmd) {
			c.event("SHUTDOWN", map[string]any{"guest": false, "reason": "host-qmp-quit"})
			c.reply(cmd, nil)
		}, nil},
		{"QEMU refuses", func(c *fakeConn, cmd fakeCmd) {
			c.replyErr(cmd, "GenericError", "no")
			c.waitClosed()
		}, &CommandError{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, func(c *fakeConn) {
				if c.negotiate() != nil {
					return
				}
				cmd, err := c.read()
				if err != nil || cmd.Execute != "quit" {
					return
				}
				tt.server(c, cmd)
			})
			m := dialT(t, f.path, Options{})
			err := m.Quit(context.Background())
			switch want := tt.wantErr.(type) {
			case nil:
				if err != nil {
					t.Errorf("Quit: got %v; want success", err)
				}
			case *CommandError:
				if !errors.As(err, &want) {
					t.Errorf("Quit: got %v; want a *CommandError", err)
				}
			}
			if err := m.Connect(); !errors.Is(err, ErrClosed) {
				t.Errorf("after Quit: Connect got %v; want ErrClosed", err)
			}
		})
	}

	t.Run("on a closed monitor", func(t *testing.T) {
		f := startFake(t, replies(nil))
		m := dialT(t, f.path, Options{})
		m.Close()
		assertIs(t, m.Quit(context.Background()), ErrClosed)
	})
}

func TestTypedHelpers(t *testing.T) {
	f := startFake(t, replies(map[string]any{
		"query-status":     map[string]any{"status": "paused", "running": false, "singlestep": false},
		"system_powerdown": nil,
		"system_reset":     nil,
		"stop":             nil,
		"cont":             nil,
		"query-kvm":        map[string]any{"enabled": true, "present": true},
		"query-cpus-fast": []map[string]any{
			{"cpu-index": 0, "qom-path": "/machine/unattached/device[0]", "thread-id": 101, "target": "x86_64", "props": map[string]int{"core-id": 0}},
			{"cpu-index": 1, "qom-path": "/machine/unattached/device[1]", "thread-id": 102, "target": "x86_64"},
		},
		"query-version": map[string]any{"qemu": map[string]int{"major": 7, "minor": 2, "micro": 22}, "package": "Debian"},
		"qom-get":       "pc-q35-7.2-machine",
		"query-machines": []map[string]any{
			{"name": "pc-q35-7.2", "alias": "q35", "cpu-max": 288},
			{"name": "pc-q35-7.1", "cpu-max": 288},
		},
	}))
	m := dialT(t, f.path, Options{})
	ctx := context.Background()
	var conn *fakeConn
	tests := []struct {
		name    string
		wantCmd string
		call    func() (got, want any, err error)
	}{
		{"Status", "query-status", func() (any, any, error) {
			s, err := m.Status(ctx)
			return s, StatusInfo{Status: "paused"}, err
		}},
		{"SystemPowerdown", "system_powerdown", func() (any, any, error) { return nil, nil, m.SystemPowerdown(ctx) }},
		{"SystemReset", "system_reset", func() (any, any, error) { return nil, nil, m.SystemReset(ctx) }},
		{"Stop", "stop", func() (any, any, error) { return nil, nil, m.Stop(ctx) }},
		{"Cont", "cont", func() (any, any, error) { return nil, nil, m.Cont(ctx) }},
		{"QueryKVM", "query-kvm", func() (any, any, error) {
			enabled, present, err := m.QueryKVM(ctx)
			return [2]bool{enabled, present}, [2]bool{true, true}, err
		}},
		{"QueryCPUsFast", "query-cpus-fast", func() (any, any, error) {
			cpus, err := m.QueryCPUsFast(ctx)
			return fmt.Sprint(cpus), fmt.Sprint([]CPUInfo{
				{CPUIndex: 0, QOMPath: "/machine/unattached/device[0]", ThreadID: 101, Target: "x86_64"},
				{CPUIndex: 1, QOMPath: "/machine/unattached/device[1]", ThreadID: 102, Target: "x86_64"},
			}), err
		}},
		{"Version", "query-version", func() (any, any, error) {
			v, err := m.Version(ctx)
			return v.String() + " " + v.Package, "7.2.22 Debian", err
		}},
		{"MachineType", "qom-get", func() (any, any, error) {
			t, err := m.MachineType(ctx)
			return t, "pc-q35-7.2", err
		}},
		{"QueryMachines", "query-machines", func() (any, any, error) {
			ms, err := m.QueryMachines(ctx)
			return fmt.Sprint(ms), fmt.Sprint([]MachineInfo{{Name: "pc-q35-7.2", Alias: "q35"}, {Name: "pc-q35-7.1"}}), err
		}},
	}
	f.mu.Lock()
	conn = f.conn
	f.mu.Unlock()
	<-conn.commands // qmp_capabilities
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want, err := tt.call()
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if got != want {
				t.Errorf("%s: got %v; want %v", tt.name, got, want)
			}
			if cmd := <-conn.commands; cmd != tt.wantCmd {
				t.Errorf("%s sent %q; want %q", tt.name, cmd, tt.wantCmd)
			}
		})
	}
}

func TestGoQemuLayers(t *testing.T) {
	f := startFake(t, replies(map[string]any{
		"query-status": map[string]any{"status": "running", "running": true, "singlestep": false},
	}))
	m := dialT(t, f.path, Options{})

	st, err := raw.NewMonitor(m).QueryStatus()
	if err != nil {
		t.Fatalf("raw QueryStatus: %v", err)
	}
	if st.Status != raw.RunStateRunning || !st.Running {
		t.Errorf("raw QueryStatus: got %+v; want running", st)
	}

	// raw still issues query-cpus, which QEMU >= 6.0 lacks: the QMP error
	// must come back as an error, not hang or kill the connection.
	_, err = raw.NewMonitor(m).QueryCpus()
	var cerr *CommandError
	if !errors.As(err, &cerr) || cerr.Class != "CommandNotFound" {
		t.Errorf("raw QueryCpus: got %v; want a CommandNotFound *CommandError", err)
	}

	d, err := qemu.NewDomain(m, "fake")
	if err != nil {
		t.Fatalf("qemu.NewDomain: %v", err)
	}
	if s, err := d.Status(); err != nil || s != qemu.StatusRunning {
		t.Errorf("Domain.Status: got %v, %v; want running", s, err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Domain.Close: %v", err)
	}
}

func TestRunRejectsBadCommands(t *testing.T) {
	f := startFake(t, replies(nil))
	m := dialT(t, f.path, Options{})
	for _, in := range []string{`not json`, `{"arguments":{}}`, `[]`} {
		if _, err := m.Run([]byte(in)); err == nil {
			t.Errorf("Run(%s): got nil error; want one", in)
		}
	}
}

func TestMonitorEvents(t *testing.T) {
	release := make(chan struct{})
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		cmd, _ := c.read()
		for _, e := range []string{"STOP", "RESUME", "SHUTDOWN"} {
			c.event(e, nil)
		}
		c.reply(cmd, nil)
		<-release
		c.waitClosed()
	})
	m := dialT(t, f.path, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := m.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	other, err := m.Events(context.Background())
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if err := m.Execute(context.Background(), "x", nil, nil); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	for _, ch := range []<-chan gqmp.Event{sub, other} {
		for _, want := range []string{"STOP", "RESUME", "SHUTDOWN"} {
			if e := <-ch; e.Event != want {
				t.Errorf("got event %q; want %q", e.Event, want)
			}
		}
	}
	cancel()
	if _, ok := <-sub; ok {
		t.Errorf("channel still open after its context ended")
	}
	close(release)
	m.Close()
	if _, ok := <-other; ok {
		t.Errorf("channel still open after Close")
	}
	if _, err := m.Events(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Events after Close: got %v; want ErrClosed", err)
	}
}

func TestCloseIdempotentNoLeak(t *testing.T) {
	f := startFake(t, replies(map[string]any{"query-status": map[string]any{"status": "running"}}))
	before := runtime.NumGoroutine()
	for range 5 {
		m, err := Dial(context.Background(), f.path, Options{})
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := m.Events(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Events(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Status(context.Background()); err != nil {
			t.Fatalf("Status: %v", err)
		}
		for range 3 {
			if err := m.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		cancel()
	}
	waitGoroutines(t, before)
}

// waitGoroutines fails unless the goroutine count drops back to want
// shortly (the fake server's handler may take a moment to notice).
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: got %d; want at most %d\n%s", got, want, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
