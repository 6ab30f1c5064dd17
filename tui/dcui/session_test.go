package dcui

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/diag"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/diagnostics"
	"github.com/virtcon/virtcon/tui/hardware"
	"github.com/virtcon/virtcon/tui/logs"
	tuipower "github.com/virtcon/virtcon/tui/power"
	"github.com/virtcon/virtcon/tui/status"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/tui/vms"
	"github.com/virtcon/virtcon/vm"
)

// gate is a core call that hangs until its ctx ends (a hung QMP socket, a
// stuck probe, a PAM module that never answers).
type gate struct{ started, ended atomic.Int32 }

func (g *gate) wait(ctx context.Context) error {
	g.started.Add(1)
	<-ctx.Done()
	g.ended.Add(1)
	return ctx.Err()
}

// listGate is a VM manager whose list hangs.
type listGate struct {
	vms.Manager
	g *gate
}

func (l listGate) List(ctx context.Context) ([]vm.Entry, error) { return nil, l.g.wait(ctx) }

// start runs cmd as the program would, without waiting: batches are run
// command by command, each in a goroutine.
func start(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		if b, ok := cmd().(tea.BatchMsg); ok {
			for _, c := range b {
				start(c)
			}
		}
	}()
}

// TestSessionCtxCancelsCommands: every screen's calls into the core derive
// from the session's ctx (common.Common.Ctx): ending the session ends the
// calls in flight, long before their own timeouts (30 s to 2 min).
func TestSessionCtxCancelsCommands(t *testing.T) {
	tests := []struct {
		name string
		// run starts the screen's calls over g, with c as the session
		run func(c common.Common, g *gate)
		// calls is how many calls of g it starts
		calls int32
	}{
		{name: "status", calls: 3, run: func(c common.Common, g *gate) {
			m := status.New(c, status.Sources{
				Host: func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
					return nil, nil, g.wait(ctx)
				},
				VMs: func(ctx context.Context) ([]vm.Entry, error) { return nil, g.wait(ctx) },
				ResolveExpiredTry: func(ctx context.Context) (*netcfg.ResolvedTry, error) {
					return nil, g.wait(ctx)
				},
			}, status.Options{})
			start(m.Init())
		}},
		{name: "vms", calls: 1, run: func(c common.Common, g *gate) {
			m := vms.New(c, listGate{g: g}, vms.Options{})
			_, cmd := m.Update(common.ActivateMsg{})
			start(cmd)
		}},
		{name: "hardware", calls: 1, run: func(c common.Common, g *gate) {
			m := hardware.New(c, hardware.Sources{Host: func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
				return nil, nil, g.wait(ctx)
			}})
			_, cmd := m.Update(common.ActivateMsg{})
			start(cmd)
		}},
		{name: "logs", calls: 1, run: func(c common.Common, g *gate) {
			m := logs.New(c, logs.Sources{List: func(ctx context.Context) ([]logs.LogFile, error) { return nil, g.wait(ctx) }})
			_, cmd := m.Update(common.ActivateMsg{})
			start(cmd)
		}},
		{name: "diagnostics", calls: 1, run: func(c common.Common, g *gate) {
			m := diagnostics.New(c, diagnostics.Sources{Dir: "/var/lib/virtcon/diagnostics",
				Write: func(ctx context.Context) (diag.Result, error) { return diag.Result{}, g.wait(ctx) }})
			for _, k := range tuitest.Keys("enter") {
				_, cmd := m.Update(k)
				start(cmd)
			}
		}},
		{name: "power", calls: 1, run: func(c common.Common, g *gate) {
			m := tuipower.New(c, tuipower.Sources{VMs: func(ctx context.Context) ([]vm.Entry, error) { return nil, g.wait(ctx) }})
			_, cmd := m.Update(common.ActivateMsg{})
			start(cmd)
		}},
		{name: "login", calls: 1, run: func(c common.Common, g *gate) {
			st := status.New(c, status.Sources{}, status.Options{})
			login := app.LoginFunc(func(ctx context.Context, _, _, _ string) (string, error) { return "", g.wait(ctx) })
			m := app.New(c, st, nil, login, nil, fakeIdle{}, app.Options{TTY: "tty1"})
			m.SetSize(80, 24)
			for _, k := range tuitest.Keys(append([]string{"l"}, append(splitText("alice"), append([]string{"tab"}, append(splitText("s3cret"), "enter")...)...)...)...) {
				_, cmd := m.Update(k)
				start(cmd)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := common.New(ctx, term.Plain, testutil.Logger(t))
			c.Session = &common.Session{User: "root", TTY: "tty1", Writer: true}
			g := &gate{}
			tt.run(c, g)
			waitUntil(t, 5*time.Second, func() bool { return g.started.Load() == tt.calls }, "calls started", &g.started)
			if n := g.ended.Load(); n != 0 {
				t.Fatalf("%d calls ended before the session did", n)
			}
			cancel()
			waitUntil(t, time.Second, func() bool { return g.ended.Load() == tt.calls }, "calls ended after the session", &g.ended)
		})
	}
}

func splitText(s string) []string {
	out := make([]string, 0, len(s))
	for _, r := range s {
		out = append(out, string(r))
	}
	return out
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool, what string, n *atomic.Int32) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after %s", what, n.Load(), d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
