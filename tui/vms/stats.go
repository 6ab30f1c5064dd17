package vms

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/vm"
)

// statsSource samples the VMs' resource use without waiting: CPU % over
// the time since its previous sample (vm.StatsSampler). The screen has a
// CPU column only when its manager gives one.
type statsSource interface {
	Sample(ctx context.Context, refs []string) ([]vm.Stats, error)
}

// statsSourceOf is the manager's sampler: *vm.Manager makes one; a
// manager that samples itself (a test's fake) is its own.
func statsSourceOf(mgr Manager) statsSource {
	switch s := mgr.(type) {
	case interface{ NewStatsSampler() *vm.StatsSampler }:
		return s.NewStatsSampler()
	case statsSource:
		return s
	}
	return nil
}

const (
	statsEvery   = 2 // ticks (seconds) between samples
	statsTimeout = 10 * time.Second
	// sparkLen is how many samples a sparkline shows
	sparkLen = 6
	// cpuColW is the CPU column: "100%" and the sparkline
	cpuColW = 4 + 1 + sparkLen
)

// statsView is the screen's live use of each VM, by UID.
type statsView struct {
	checked  bool // src was looked for
	src      statsSource
	sampling bool
	cur      map[string]vm.Stats
	history  map[string][]float64 // CPU % of the last samples, -1 unknown
}

type statsMsg struct {
	stats []vm.Stats
	err   error
}

// sampleStats starts a sample when one is due and none is running.
func (m *Model) sampleStats(now bool) tea.Cmd {
	sv := &m.stats
	if !sv.checked {
		sv.checked, sv.src = true, statsSourceOf(m.mgr)
	}
	if sv.src == nil || sv.sampling || (!now && m.ticks%statsEvery != 0) {
		return nil
	}
	sv.sampling = true
	src, parent := sv.src, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, statsTimeout)
		defer cancel()
		st, err := src.Sample(ctx, nil)
		return statsMsg{st, err}
	}
}

// statsLoaded keeps a sample and each VM's CPU history.
func (m *Model) statsLoaded(msg statsMsg) {
	sv := &m.stats
	sv.sampling = false
	if msg.err != nil {
		if m.c.Logger != nil {
			m.c.Logger.Debug("vms: stats", "err", msg.err)
		}
		return
	}
	cur := map[string]vm.Stats{}
	hist := map[string][]float64{}
	for _, s := range msg.stats {
		cur[s.UID] = s
		v := -1.0
		if s.CPUKnown {
			v = s.CPUPercent
		}
		h := append(sv.history[s.UID], v)
		if len(h) > sparkLen {
			h = h[len(h)-sparkLen:]
		}
		if s.Phase == vm.PhaseStopped || s.Phase == vm.PhaseSaved {
			h = nil // a stopped VM has no use to draw
		}
		hist[s.UID] = h
	}
	sv.cur, sv.history = cur, hist
}

// sparkRunes are the levels of a sparkline, lowest first: block elements
// where the font has them (rich), ASCII elsewhere (the Linux console's
// VGA font and serial lines).
var (
	sparkRich  = []rune("▁▂▃▄▅▆▇█")
	sparkASCII = []rune("_.:-=+*#")
)

// sparkline draws CPU % values (full scale: all the VM's vCPUs busy),
// sparkLen cells, oldest first, right-aligned; an unknown sample is a
// blank.
func sparkline(values []float64, cpus int, tier term.Tier) string {
	levels := sparkASCII
	if tier == term.Rich {
		levels = sparkRich
	}
	full := 100.0 * float64(max(cpus, 1))
	var b strings.Builder
	for range sparkLen - len(values) {
		b.WriteByte(' ')
	}
	for _, v := range values {
		if v < 0 {
			b.WriteByte(' ')
			continue
		}
		i := int(v / full * float64(len(levels)))
		b.WriteRune(levels[min(max(i, 0), len(levels)-1)])
	}
	return b.String()
}

// cpuCell is a row's CPU column: the last sample's % and the sparkline;
// "-" when nothing is known.
func (m *Model) cpuCell(e vm.Entry) string {
	st, ok := m.stats.cur[e.UID]
	hist := m.stats.history[e.UID]
	if !ok || e.PID == 0 || len(hist) == 0 {
		return "-"
	}
	pct := "  - "
	if st.CPUKnown {
		pct = fmt.Sprintf("%3.0f%%", st.CPUPercent)
	}
	return pct + " " + sparkline(hist, e.CPUs, m.c.Styles.Tier)
}

// memCell is a row's MEMORY column: the QEMU's resident memory over the
// VM's size ("300M/2G") when known, else the size as before.
func (m *Model) memCell(e vm.Entry) string {
	size := "-"
	if e.MemoryMiB > 0 {
		size = strconv.Itoa(e.MemoryMiB) + "MiB"
	}
	st, ok := m.stats.cur[e.UID]
	if !ok || e.PID == 0 || st.RSSBytes <= 0 || e.MemoryMiB <= 0 {
		return size
	}
	return shortMiB(st.RSSBytes>>20) + "/" + shortMiB(int64(e.MemoryMiB))
}

// shortMiB writes MiB as "300M" or "1.5G".
func shortMiB(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + "M"
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1024), ".0") + "G"
}
