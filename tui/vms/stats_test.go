package vms

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/vm"
)

// statsManager is the fake manager with a scripted sampler: each Sample
// returns the next of samples (the last one again at the end).
type statsManager struct {
	*fakeManager
	smu     sync.Mutex
	samples [][]vm.Stats
	n       int
}

func (f *statsManager) Sample(context.Context, []string) ([]vm.Stats, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	i := min(f.n, len(f.samples)-1)
	f.n++
	return f.samples[i], nil
}

// running web-01 (2 vCPUs) and paused db-01 (8) with a CPU history
func statsSamples() [][]vm.Stats {
	var out [][]vm.Stats
	for _, pct := range []float64{-1, 20, 60, 110, 200, 150} {
		web := vm.Stats{UID: uid(1), Name: "web-01", Phase: vm.PhaseRunning, RSSBytes: 300 << 20, CPUPercent: pct, CPUKnown: pct >= 0}
		db := vm.Stats{UID: uid(3), Name: "db-01", Phase: vm.PhasePaused, RSSBytes: 3 << 30, CPUPercent: 0, CPUKnown: pct >= 0}
		off := vm.Stats{UID: uid(2), Name: "web-02", Phase: vm.PhaseStopped}
		out = append(out, []vm.Stats{web, off, db})
	}
	return out
}

func statsModel(t *testing.T, tier term.Tier) *Model {
	t.Helper()
	f := &statsManager{fakeManager: &fakeManager{entries: fakeEntries()}, samples: statsSamples()}
	c := common.New(context.Background(), tier, nil)
	c.Session = writer()
	m := New(c, f, Options{})
	m.SetSize(areaW, areaH)
	deliver(t, m, common.ActivateMsg{}) // the list, then the first sample
	for range 2 * 5 {
		deliver(t, m, common.TickMsg{}) // a sample every 2 ticks: 5 more
	}
	return m
}

// The list with live stats: CPU % and a sparkline per running VM (blocks
// on the rich tier, ASCII on the plain one), memory as RSS over size;
// 80x24 still fits.
func TestGoldenStats(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		t.Run(tier.String(), func(t *testing.T) {
			m := statsModel(t, tier)
			out := m.View().Content
			tuitest.RequireGolden(t, tier, out, areaW, areaH)
			plain := ansi.Strip(out)
			// 20, 60, 110, 200, 150, 150 of 200 (2 vCPUs), oldest first
			spark := "150% ▁▃▅█▇▇ kvm"
			if tier != term.Rich {
				spark = "150% _:=#** kvm"
			}
			for _, w := range []string{"CPU", spark, "300M/2G", "3G/16G", "2048MiB"} {
				if !strings.Contains(plain, w) {
					t.Errorf("screen lacks %q:\n%s", w, plain)
				}
			}
		})
	}
}

func TestSparkline(t *testing.T) {
	tests := []struct {
		values []float64
		cpus   int
		tier   term.Tier
		want   string
	}{
		{nil, 1, term.Rich, "      "},
		{[]float64{0, 50, 100}, 1, term.Rich, "   ▁▅█"},
		{[]float64{0, 50, 100}, 1, term.Plain, "   _=#"},
		{[]float64{0, 50, 100}, 1, term.Linux, "   _=#"}, // the VGA font: ASCII too
		{[]float64{-1, 100, 400}, 4, term.Rich, "    ▃█"},
		{[]float64{1, 2, 3, 4, 5, 6}, 0, term.Plain, "______"},
		{[]float64{900}, 1, term.Rich, "     █"}, // over the scale: full
	}
	for _, tt := range tests {
		if got := sparkline(tt.values, tt.cpus, tt.tier); got != tt.want {
			t.Errorf("sparkline(%v, %d, %s) = %q; want %q", tt.values, tt.cpus, tt.tier, got, tt.want)
		}
	}
}

// The history keeps the last sparkLen samples and forgets a VM that
// stopped.
func TestStatsHistory(t *testing.T) {
	m := &Model{}
	for i := range 10 {
		m.statsLoaded(statsMsg{stats: []vm.Stats{{UID: "a", Phase: vm.PhaseRunning, CPUPercent: float64(i), CPUKnown: true}, {UID: "b", Phase: vm.PhaseStopped}}})
	}
	h := m.stats.history["a"]
	if len(h) != sparkLen || h[0] != 4 || h[sparkLen-1] != 9 {
		t.Errorf("history = %v; want the last %d samples 4..9", h, sparkLen)
	}
	if len(m.stats.history["b"]) != 0 {
		t.Errorf("stopped VM history = %v; want none", m.stats.history["b"])
	}
	if m.cpuCell(vm.Entry{UID: "b"}) != "-" {
		t.Errorf("stopped VM CPU cell %q; want -", m.cpuCell(vm.Entry{UID: "b"}))
	}
}
