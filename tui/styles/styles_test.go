package styles

import (
	"strings"
	"testing"

	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

func TestPlainIsASCII(t *testing.T) {
	s := New(term.Plain)
	var parts []string
	b := s.Border
	parts = append(parts, b.Top, b.Bottom, b.Left, b.Right, b.TopLeft, b.TopRight, b.BottomLeft, b.BottomRight, b.MiddleLeft, b.MiddleRight, s.Ellipsis, s.Bullet)
	for _, l := range []Level{OK, Info, Warning, Failure, Unknown} {
		parts = append(parts, s.Badgef(l))
	}
	for _, p := range parts {
		tuitest.RequireASCII(t, p)
	}
}

func TestBadgeWordInEveryTier(t *testing.T) {
	for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
		s := New(tier)
		if got := s.Badgef(Failure); !strings.Contains(got, "[FAIL]") {
			t.Errorf("%v: Badgef(Failure) = %q; want it to contain [FAIL]", tier, got)
		}
	}
}

func TestLinuxBorderInVGAFont(t *testing.T) {
	// The single-line box drawing characters are in code page 437; the
	// rounded corners are not.
	b := New(term.Linux).Border
	for _, r := range b.TopLeft + b.TopRight + b.BottomLeft + b.BottomRight {
		if strings.ContainsRune("╭╮╯╰", r) {
			t.Errorf("linux border uses %q, which the VGA font lacks", r)
		}
	}
}

func TestSelectedAndMatchShowWithoutColour(t *testing.T) {
	for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
		s := New(tier)
		if !s.Selected.GetBold() {
			t.Errorf("%v: Selected is not bold", tier)
		}
		if !s.Match.GetReverse() {
			t.Errorf("%v: Match is not reverse video", tier)
		}
	}
}
