package diagnostics

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/diag"
	hostsvc "github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

const width, height = 76, 17

var fixedNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

const dir = "/var/lib/virtcon/diagnostics"

var fakeResult = diag.Result{
	Path:  dir + "/virtcon-diagnostics-20260314T092653Z.tar.gz",
	Size:  12391,
	Files: []string{"versions.json", "inventory.json", "checks.json", "errors.json"},
}

// clock is a settable fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newModel(t *testing.T, tier term.Tier, src Sources, writer bool) (*Model, *clock) {
	c := common.New(context.Background(), tier, testutil.Logger(t))
	clk := &clock{fixedNow}
	c.Now = clk.now
	c.Session = &common.Session{User: "alice", TTY: "tty1", Writer: writer, Holder: "bob on tty2 since 09:12"}
	m := New(c, src)
	m.SetSize(width, height)
	return m, clk
}

func okSources(calls *atomic.Int32) Sources {
	return Sources{Dir: dir, Write: func(context.Context) (diag.Result, error) {
		if calls != nil {
			calls.Add(1)
		}
		return fakeResult, nil
	}}
}

func view(m *Model) string { return m.View().Content }

// states renders the screen idle, writing, written and failed.
func states(t *testing.T, tier term.Tier) map[string]string {
	t.Helper()
	out := map[string]string{}
	m, clk := newModel(t, tier, okSources(nil), true)
	out["idle"] = view(m)
	_, cmd := m.Update(tuitest.Key("enter"))
	clk.t = clk.t.Add(3 * time.Second)
	out["writing"] = view(m)
	m.Update(cmd())
	out["written"] = view(m)

	f, _ := newModel(t, tier, Sources{Dir: dir, Write: func(context.Context) (diag.Result, error) {
		return diag.Result{}, errors.New("diagnostics: write " + dir + "/x.tar.gz: no space left on device")
	}}, true)
	_, cmd = f.Update(tuitest.Key("b"))
	f.Update(cmd())
	out["failed"] = view(f)
	return out
}

func TestGolden(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		for name, out := range states(t, tier) {
			t.Run(tier.String()+"_"+name, func(t *testing.T) {
				tuitest.RequireGolden(t, tier, out, width, height)
			})
		}
	}
}

func TestPlainIsASCII(t *testing.T) {
	for name, out := range states(t, term.Plain) {
		t.Run(name, func(t *testing.T) { tuitest.RequireASCII(t, out) })
	}
	m, _ := newModel(t, term.Plain, okSources(nil), true)
	for _, b := range m.ShortHelp() {
		tuitest.RequireASCII(t, b.Help().Key+b.Help().Desc)
	}
}

func TestWriteShowsResult(t *testing.T) {
	var calls atomic.Int32
	m, _ := newModel(t, term.Plain, okSources(&calls), true)
	if got, want := m.CLI(), "cd "+dir+" && virt diagnostics"; got != want {
		t.Errorf("CLI before a write = %q; want %q", got, want)
	}
	_, cmd := m.Update(tuitest.Key("enter"))
	if cmd == nil || !m.Running() {
		t.Fatal("enter did not start a write")
	}
	if !strings.Contains(view(m), "writing the bundle...") {
		t.Error("no progress text while writing")
	}
	// a second press while running is ignored, with a message
	if _, again := m.Update(tuitest.Key("b")); again != nil {
		t.Error("a second press started a second write")
	}
	if v := ansi.Strip(view(m)); !strings.Contains(v, "already being written") {
		t.Errorf("no message for the ignored press:\n%s", v)
	}
	m.Update(cmd())
	if calls.Load() != 1 {
		t.Errorf("Write called %d times; want 1", calls.Load())
	}
	v := ansi.Strip(view(m))
	for _, want := range []string{"[PASS] wrote 12.1 KiB (12391 bytes)", fakeResult.Path,
		"versions.json, inventory.json, checks.json, errors.json"} {
		if !strings.Contains(v, want) {
			t.Errorf("screen lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "already being written") {
		t.Error("the stale message stayed after the write finished")
	}
	if got, want := m.CLI(), "cd "+dir+" && virt diagnostics"; got != want {
		t.Errorf("CLI after a write = %q; want %q", got, want)
	}
	// a new write is allowed once the first finished
	if _, cmd := m.Update(tuitest.Key("b")); cmd == nil {
		t.Error("b after a finished write did not start another")
	}
}

func TestErrorShownVerbatim(t *testing.T) {
	msg := "diagnostics: write /var/lib/virtcon/diagnostics/virtcon-diagnostics-20260314T092653Z.tar.gz: open: read-only file system"
	m, _ := newModel(t, term.Plain, Sources{Dir: dir, Write: func(context.Context) (diag.Result, error) {
		return diag.Result{}, errors.New(msg)
	}}, true)
	_, cmd := m.Update(tuitest.Key("enter"))
	m.Update(cmd())
	// the error is wrapped over lines; joined again it is the same text
	v := ansi.Strip(view(m))
	var joined []string
	for _, l := range strings.Split(v, "\n") {
		if strings.HasPrefix(l, "    ") {
			joined = append(joined, strings.TrimSpace(l))
		}
	}
	if got := strings.Join(joined, " "); !strings.Contains(strings.ReplaceAll(got, " ", ""), strings.ReplaceAll(msg, " ", "")) {
		t.Errorf("error lines %q; want %q verbatim", got, msg)
	}
	if !strings.Contains(v, "[FAIL] the bundle was not written") {
		t.Errorf("no failure badge:\n%s", v)
	}
}

// TestReadOnlyConsoleMayWrite: the bundle only reads the host, so a
// console without the writer lock may write it; nobody logged in may not.
func TestReadOnlyConsoleMayWrite(t *testing.T) {
	m, _ := newModel(t, term.Plain, okSources(nil), false)
	if _, cmd := m.Update(tuitest.Key("enter")); cmd == nil {
		t.Error("a read-only console was refused the bundle")
	}
	n, _ := newModel(t, term.Plain, okSources(nil), false)
	n.c.Session.User = ""
	if _, cmd := n.Update(tuitest.Key("enter")); cmd != nil {
		t.Error("a console without login started a bundle")
	}
	if v := ansi.Strip(view(n)); !strings.Contains(v, "log in first") {
		t.Errorf("no refusal text:\n%s", v)
	}
}

func TestOtherKeysDoNothing(t *testing.T) {
	m, _ := newModel(t, term.Plain, okSources(nil), true)
	for _, k := range []string{"a", "c", "y", "1"} {
		if _, cmd := m.Update(tuitest.Key(k)); cmd != nil || m.Running() {
			t.Errorf("key %q started a write", k)
		}
	}
	for _, msg := range []tea.Msg{common.ActivateMsg{}, common.RefreshMsg{}, common.TickMsg{Now: fixedNow}} {
		if _, cmd := m.Update(msg); cmd != nil {
			t.Errorf("%T started something; the screen writes only when asked", msg)
		}
	}
}

// TestLiveSources writes a real bundle of a fixture host into a temp
// layout; the probe verdict comes from the per-boot cache, as live.
func TestLiveSources(t *testing.T) {
	host := fakehost.Tree(t, "intel-iommu")
	layout := paths.New(t.TempDir())
	cached := kvmprobe.Result{Stage: kvmprobe.StageOpen, Error: "cached fake"}
	fakehost.CacheVerdict(t, layout.AccelCacheFile(), host, hostinfo.AccelCache{Acceleration: hostinfo.AccelTCG, Probe: &cached})
	src := LiveSources(hostsvc.New(hostsvc.Options{Layout: layout, HostRoot: host, Logger: testutil.Logger(t)}).Diag)
	if src.Dir != filepath.Join(layout.StateDir(), "diagnostics") {
		t.Errorf("Dir %q; want under the state dir", src.Dir)
	}
	res, err := src.Write(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(res.Path) != src.Dir || !strings.HasPrefix(filepath.Base(res.Path), "virtcon-diagnostics-") {
		t.Errorf("path %q; want virtcon-diagnostics-* in %s", res.Path, src.Dir)
	}
	st, err := os.Stat(src.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v (%v); want 0700", st.Mode().Perm(), err)
	}
	fst, err := os.Stat(res.Path)
	if err != nil || fst.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v (%v); want 0600", fst.Mode().Perm(), err)
	}
	// checks.json carries the cached probe's verdict
	f, _ := os.Open(res.Path)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "checks.json" {
			b, _ := io.ReadAll(tr)
			found = strings.Contains(string(b), "cached fake")
		}
	}
	if !found {
		t.Error("checks.json does not carry the cached probe result")
	}
}
