package status

import (
	"context"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/term"
)

// A failed rollback's error can be long (it joins each step that
// failed); the NETWORK line, cut at the screen's width, still says how
// to retry.
func TestFailedRollbackAdviceShows(t *testing.T) {
	rerr := "restore link br0: set master of eno3: no such device; restart the DHCP client the try stopped: eno1: timeout"
	src := fakeSources()
	src.ResolveExpiredTry = func(context.Context) (*netcfg.ResolvedTry, error) { return nil, nil }
	src.PendingTry = func() (*netcfg.Pending, error) {
		return &netcfg.Pending{ID: "t1", Deadline: fixedNow.Add(-1), RollbackError: rerr}, nil
	}
	m := newModel(t, term.Plain, src)
	m.Update(m.loadNet()())
	for _, l := range strings.Split(ansi.Strip(m.Render()), "\n") {
		if strings.Contains(l, "NETWORK") {
			if !strings.Contains(l, "rollback failed, retry: virt net rollback") {
				t.Errorf("NETWORK line %q; want it to say how to retry", l)
			}
			return
		}
	}
	t.Fatalf("no NETWORK line:\n%s", ansi.Strip(m.Render()))
}
