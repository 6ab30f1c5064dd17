package status

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

// fakeDirector is an enrolled, connected agent, as agent.Status.Line
// words it.
func fakeDirector() *Director {
	return &Director{Enrolled: true, Running: true, State: "connected",
		Line: "Director: connected to director.example.org:9443 · node 1a2b3c4d… · cert until 2026-04-13"}
}

// The DIRECTOR line is the agent's own line, marked when something is
// wrong, in ASCII outside the rich tier; a host that never enrolled gets
// none, one whose status cannot be read says so.
func TestDirectorLine(t *testing.T) {
	revoked := &Director{Enrolled: true, State: "revoked", Alert: "revoked",
		Line: "Director: REVOKED at 2026-03-14 09:12: VMs untouched; re-enrol"}
	expiredLeft := &Director{Alert: "expired", State: "expired",
		Line: "Director: certificate EXPIRED at 2026-03-14 09:12: VMs untouched; re-enrol"}
	stopped := &Director{Enrolled: true, State: "stopped",
		Line: "Director: enrolled with director.example.org:9443 · node 1a2b3c4d… · agent not running"}
	backoff := &Director{Enrolled: true, Running: true, State: "backoff",
		Line: "Director: not connected to director.example.org:9443 (backoff): connection refused"}
	for _, tc := range []struct {
		name string
		tier term.Tier
		d    *Director
		err  error
		want string // "" for no line
	}{
		{"connected, rich", term.Rich, fakeDirector(), nil, "DIRECTOR  connected to director.example.org:9443 · node 1a2b3c4d… · cert until 2026-04-13"},
		{"connected, plain", term.Plain, fakeDirector(), nil, "DIRECTOR  connected to director.example.org:9443 - node 1a2b3c4d~ - cert until 2026-04-13"},
		{"connected, linux", term.Linux, fakeDirector(), nil, "DIRECTOR  connected to director.example.org:9443 - node 1a2b3c4d~ - cert until 2026-04-13"},
		{"revoked", term.Plain, revoked, nil, "DIRECTOR  [FAIL] REVOKED at 2026-03-14 09:12: VMs untouched; re-enrol"},
		{"expired, credentials gone, alert kept", term.Plain, expiredLeft, nil, "DIRECTOR  [FAIL] certificate EXPIRED at 2026-03-14 09:12: VMs untouched; re-enrol"},
		{"agent not running", term.Plain, stopped, nil, "DIRECTOR  [INFO] enrolled with director.example.org:9443 - node 1a2b3c4d~ - agent not running"},
		{"backoff", term.Plain, backoff, nil, "DIRECTOR  [WARN] not connected to director.example.org:9443 (backoff): connection refused"},
		{"not enrolled", term.Plain, &Director{Line: "Director: not enrolled"}, nil, ""},
		{"no status", term.Plain, nil, nil, ""},
		{"unreadable", term.Plain, nil, errors.New("agent.yaml: permission denied"), "DIRECTOR  [????] agent status unreadable: agent.yaml: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fakeSources()
			src.Director = func() (*Director, error) { return tc.d, tc.err }
			m := newModel(t, tc.tier, src)
			m.Update(m.loadNet()())
			out := m.Content(300, 40)
			if tc.tier != term.Rich {
				tuitest.RequireASCII(t, out)
			}
			var line string
			for _, l := range strings.Split(ansi.Strip(out), "\n") {
				if strings.HasPrefix(l, "DIRECTOR") {
					line = strings.TrimRight(l, " ")
				}
			}
			if line != tc.want {
				t.Errorf("director line\n  %q\nwant\n  %q", line, tc.want)
			}
		})
	}
}

// At 80x24 (the app's 76x16) the DIRECTOR line stays on screen with
// VMS, NETWORK and BOOT: the hint's continuation gives way first.
func TestDirectorLineFits(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		src := fakeSources()
		src.Director = func() (*Director, error) { return fakeDirector(), nil }
		m := newModel(t, tier, src)
		m.Update(m.loadHost()())
		m.Update(m.loadVMs()())
		m.Update(m.loadNet()())
		text := ansi.Strip(m.Content(76, 16))
		for _, want := range []string{"VMS", "NETWORK", "BOOT", "DIRECTOR  connected to director.example.org:9443", "HEALTH"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: content lacks %q:\n%s", tier, want, text)
			}
		}
	}
}

// The live source reads the agent's files: none is no line; a credential
// file that cannot be read is an unreadable status, said on the line.
func TestLiveDirectorSource(t *testing.T) {
	layout := paths.New(t.TempDir())
	h := host.New(host.Options{Layout: layout, HostRoot: t.TempDir(), Logger: testutil.Logger(t)})
	live := LiveSources(h)
	d, err := live.Director()
	if err != nil || d == nil || d.Enrolled || d.Line != "Director: not enrolled" {
		t.Fatalf("no agent files: %+v, %v; want not enrolled", d, err)
	}
	if err := os.MkdirAll(agent.IdentityFile(layout), 0o700); err != nil {
		t.Fatal(err)
	}
	src := fakeSources()
	src.Director = live.Director
	m := newModel(t, term.Plain, src)
	m.Update(m.loadNet()())
	text := ansi.Strip(m.Content(300, 40))
	if !strings.Contains(text, "DIRECTOR  [????] agent status unreadable: ") {
		t.Errorf("an unreadable identity shows no unreadable DIRECTOR line:\n%s", text)
	}
}
