package status

import (
	"fmt"
	"strings"

	"github.com/virtcon/virtcon/tui/term"
)

// ring keeps the last len(vals) samples; the oldest is overwritten.
type ring struct {
	vals []float64
	next int // where the next sample goes
	n    int // samples held, up to len(vals)
}

func newRing(size int) *ring { return &ring{vals: make([]float64, max(size, 1))} }

func (r *ring) push(v float64) {
	r.vals[r.next] = v
	r.next = (r.next + 1) % len(r.vals)
	r.n = min(r.n+1, len(r.vals))
}

// values returns the samples held, oldest first.
func (r *ring) values() []float64 {
	out := make([]float64, 0, r.n)
	for i := r.n; i > 0; i-- {
		out = append(out, r.vals[(r.next-i+len(r.vals))%len(r.vals)])
	}
	return out
}

// last is the newest sample.
func (r *ring) last() (float64, bool) {
	if r.n == 0 {
		return 0, false
	}
	return r.vals[(r.next-1+len(r.vals))%len(r.vals)], true
}

// resize keeps the newest samples that fit in size.
func (r *ring) resize(size int) {
	size = max(size, 1)
	if size == len(r.vals) {
		return
	}
	v := r.values()
	if len(v) > size {
		v = v[len(v)-size:]
	}
	*r = ring{vals: make([]float64, size)}
	for _, x := range v {
		r.push(x)
	}
}

// Sparkline levels, lowest first. The Linux VGA font and serial terminals
// lack the eighth blocks, so those tiers use ASCII that reads as rising.
const (
	richLevels  = "▁▂▃▄▅▆▇█"
	asciiLevels = "_.-=+*#@"
)

// sparkline renders percentages (0-100) as width cells, newest on the
// right; cells without a sample yet are blank.
func sparkline(vals []float64, width int, tier term.Tier) string {
	levels := []rune(asciiLevels)
	if tier == term.Rich {
		levels = []rune(richLevels)
	}
	if len(vals) > width {
		vals = vals[len(vals)-width:]
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", width-len(vals)))
	for _, v := range vals {
		i := int(v / 100 * float64(len(levels)))
		b.WriteRune(levels[min(max(i, 0), len(levels)-1)])
	}
	return b.String()
}

// percent is a percentage as a fixed 5-cell number after a space
// ("  12%", " 100%"); "   --" before there is one.
func percent(v float64, ok bool) string {
	if !ok {
		return "   --"
	}
	return fmt.Sprintf(" %3.0f%%", v)
}

// loadFixed is the width of the load line without its two sparklines:
// "  Load     CPU " + "  12%" + "   Mem " + "  45%", plus the frame's
// leading space.
const loadFixed = 2 + 8 + 1 + 4 + 5 + 3 + 4 + 5 + 1

// sparkWidth is how many samples each sparkline shows in a w-cell frame
// (22 at 80 columns).
func sparkWidth(w int) int { return max((w-2-loadFixed)/2, 4) }
