package status

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/vm"
)

var fixedNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func fakeSources() Sources {
	inv := &hostinfo.Inventory{
		Hostname: "esx-lab-01",
		CPU:      hostinfo.CPUInfo{Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Sockets: ptr(2), Cores: ptr(64), Threads: ptr(128)},
		Memory:   hostinfo.MemoryInfo{TotalBytes: ptr(uint64(256 << 30)), AvailableBytes: ptr(uint64(201 << 30))},
		NUMA: hostinfo.NUMAInfo{Nodes: []hostinfo.NUMANode{
			{ID: 0, MemTotalBytes: ptr(uint64(128 << 30))}, {ID: 1, MemTotalBytes: ptr(uint64(128 << 30))},
		}},
	}
	rep := &hostinfo.Report{
		Acceleration: hostinfo.AccelKVM, AccelerationReason: "KVM usable",
		Checks: []hostinfo.Check{
			{ID: "kvm.api", Status: hostinfo.Pass, Detail: "KVM API 12"},
			{ID: "hugepages", Status: hostinfo.Unknown, Detail: "no hugepages reserved"},
			{ID: "iommu.kernel", Status: hostinfo.Warn, Detail: "IOMMU off on the kernel command line", Hint: "add intel_iommu=on to the kernel command line and reboot"},
		},
	}
	return Sources{
		Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) { return inv, rep, nil },
		VMs: func(context.Context) ([]vm.Entry, error) {
			return []vm.Entry{
				{Name: "web-01", Phase: vm.PhaseRunning}, {Name: "web-02", Phase: vm.PhaseRunning},
				{Name: "db-01", Phase: vm.PhaseRunning}, {Name: "build", Phase: vm.PhaseStopped},
				{Name: "old", Phase: vm.PhasePaused},
			}, nil
		},
		PendingTry: func() (*netcfg.Pending, error) {
			return &netcfg.Pending{ID: "t1", Started: fixedNow.Add(-18 * time.Second), Deadline: fixedNow.Add(42 * time.Second)}, nil
		},
		Addresses: func() ([]Addr, error) {
			return []Addr{
				{"eno1", netip.MustParsePrefix("192.168.10.5/24")},
				{"eno1", netip.MustParsePrefix("2001:db8::5/64")},
			}, nil
		},
		WebTerminal: func() bool { return false },
	}
}

func newModel(tier term.Tier, src Sources) *Model {
	c := common.New(tier, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.Now = func() time.Time { return fixedNow }
	return New(c, src, Options{Product: "virtcon", Version: "0.4.0"})
}

// untilLoaded quits the program once every source has answered, so the
// golden frame is the loaded screen without timing guesses.
type untilLoaded struct{ *Model }

func (u untilLoaded) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := u.Model.Update(msg)
	if u.Loaded() {
		return u, tea.Quit
	}
	return u, cmd
}

func runLoaded(t *testing.T, tier term.Tier) *Model {
	t.Helper()
	prof := colorprofile.TrueColor
	if tier == term.Plain {
		prof = colorprofile.Ascii
	}
	tm := teatest.NewTestModel(t, untilLoaded{newModel(tier, fakeSources())},
		teatest.WithInitialTermSize(80, 24),
		teatest.WithProgramOptions(tea.WithColorProfile(prof)))
	fm := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second))
	return fm.(untilLoaded).Model
}

func checkSize(t *testing.T, out string, w, h int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) != h {
		t.Errorf("got %d lines; want %d", len(lines), h)
	}
	for i, l := range lines {
		if got := lipgloss.Width(l); got != w {
			t.Errorf("line %d is %d cells wide; want %d: %q", i, got, w, l)
		}
	}
}

func TestGoldenRich(t *testing.T) {
	m := runLoaded(t, term.Rich)
	out := m.Render()
	checkSize(t, out, 80, 24)
	teatest.RequireEqualOutput(t, []byte(out))
}

func TestGoldenPlain(t *testing.T) {
	m := runLoaded(t, term.Plain)
	out := m.Render()
	checkSize(t, out, 80, 24)
	teatest.RequireEqualOutput(t, []byte(out))
	text := ansi.Strip(out)
	for _, want := range []string{"esx-lab-01", "https://192.168.10.5:8443/", "[WARN] iommu.kernel", "3 running", "0:42", "F2/l log in"} {
		if !strings.Contains(text, want) {
			t.Errorf("plain screen lacks %q", want)
		}
	}
}

func TestPlainOutputIsASCII(t *testing.T) {
	m := newModel(term.Plain, fakeSources())
	tm := teatest.NewTestModel(t, untilLoaded{m}, teatest.WithInitialTermSize(80, 24),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
	raw, err := io.ReadAll(tm.FinalOutput(t, teatest.WithFinalTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	screens := map[string][]byte{"view": []byte(m.Render()), "terminal output": raw}
	m.showHelp = true
	screens["help view"] = []byte(m.Render())
	for name, b := range screens {
		for i, c := range b {
			if c > 0x7E {
				t.Fatalf("%s: byte %#x at %d is above 0x7E: %q", name, c, i, b[max(i-20, 0):min(i+20, len(b))])
			}
		}
	}
}

func TestZeroSizeRenders80x24(t *testing.T) {
	for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
		m := newModel(tier, fakeSources())
		m.Update(tea.WindowSizeMsg{Width: 0, Height: 0})
		checkSize(t, m.Render(), 80, 24)
	}
}

func TestFixedSizeIgnoresTerminal(t *testing.T) {
	m := newModel(term.Plain, fakeSources())
	m.opts.FixedSize = true
	m.SetSize(100, 30)
	m.Update(tea.WindowSizeMsg{Width: 0, Height: 0})
	checkSize(t, m.Render(), 100, 30)
}

// TestUpdateNeverBlocks: with a collector that takes 2s, a key is still
// answered at once, both by Update and by the running program.
func TestUpdateNeverBlocks(t *testing.T) {
	src := fakeSources()
	slow := func(ctx context.Context) ([]vm.Entry, error) {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return nil, errors.New("slow")
	}
	src.VMs = slow
	src.Host = func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		_, err := slow(ctx)
		return nil, nil, err
	}

	m := newModel(term.Rich, src)
	start := time.Now()
	_ = m.Init() // returns commands; running them is the program's job
	m.Update(tea.KeyPressMsg{Code: 'r', Text: "r"})
	m.Update(tea.KeyPressMsg{Code: 'h', Text: "h"})
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Init+Update took %v with a slow collector; want well under 100ms", d)
	}
	if !m.showHelp {
		t.Errorf("help key did not toggle help")
	}

	tm := teatest.NewTestModel(t, newModel(term.Rich, src), teatest.WithInitialTermSize(80, 24))
	time.Sleep(50 * time.Millisecond) // the slow loads are in flight
	start = time.Now()
	tm.Send(tea.KeyPressMsg{Code: 'q', Text: "q"})
	tm.WaitFinished(t, teatest.WithFinalTimeout(time.Second))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("quit took %v while a collector was busy; want under 500ms", d)
	}
}

func TestWorst(t *testing.T) {
	r := &hostinfo.Report{Checks: []hostinfo.Check{
		{ID: "a", Status: hostinfo.Pass}, {ID: "b", Status: hostinfo.Unknown},
		{ID: "c", Status: hostinfo.Fail}, {ID: "d", Status: hostinfo.Warn}, {ID: "e", Status: hostinfo.Fail},
	}}
	if c, ok := Worst(r); !ok || c.ID != "c" {
		t.Errorf("Worst = %q, %v; want c, true", c.ID, ok)
	}
	if _, ok := Worst(&hostinfo.Report{Checks: []hostinfo.Check{{ID: "a", Status: hostinfo.Pass}}}); ok {
		t.Errorf("Worst of all-pass = true; want false")
	}
}

func TestURL(t *testing.T) {
	tests := map[string]string{
		"192.168.10.5": "https://192.168.10.5:8443/",
		"2001:db8::5":  "https://[2001:db8::5]:8443/",
	}
	for in, want := range tests {
		if got := URL(netip.MustParseAddr(in)); got != want {
			t.Errorf("URL(%s) = %q; want %q", in, got, want)
		}
	}
}

func TestListening(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "net")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tcp := "  sl  local_address rem_address   st\n" +
		"   0: 00000000:0016 00000000:0000 0A 00000000:00000000\n" +
		"   1: 0100007F:20FB 0100007F:D000 01 00000000:00000000\n"
	if err := os.WriteFile(filepath.Join(dir, "tcp"), []byte(tcp), 0o644); err != nil {
		t.Fatal(err)
	}
	if Listening(root, WebPort) {
		t.Errorf("Listening(8443) = true for an established socket; want false")
	}
	if !Listening(root, 22) {
		t.Errorf("Listening(22) = false; want true")
	}
}
