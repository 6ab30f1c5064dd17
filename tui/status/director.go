package status

import (
	"strings"

	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Director is what the status screen's DIRECTOR line shows of the node
// agent (agent.Status).
type Director struct {
	// Enrolled: the host has a director identity. A host without one
	// (standalone, the default) gets no line: the Director screen (m)
	// says "not enrolled", and the 80x24 screen keeps its row for the
	// health hints.
	Enrolled bool
	// Line is the agent's own one line (agent.Status.Line), the same
	// words as `virt agent status`: "Director: connected to HOST · node
	// 1a2b… · cert until D", "Director: REVOKED at T: VMs untouched;
	// re-enrol".
	Line string
	// Alert is the dead credential's alert (revoked or expired), "" when none:
	// the line is shown then, enrolled or not.
	Alert string
	// Running: an agent runs; State is its session state (connecting,
	// connected, backoff, revoked, expired, stopped).
	Running bool
	State   string
}

// directorLine is the DIRECTOR line after its label; show is false when
// there is nothing to say (not enrolled, no alert, read fine).
func (m *Model) directorLine() (line string, show bool) {
	s := m.c.Styles
	switch {
	case !m.netLoaded:
		return "", false
	case m.dirErr != nil:
		// unreadable is not "not enrolled": say so
		return s.Badgef(styles.Unknown) + " agent status unreadable: " + m.clean(m.dirErr.Error()), true
	case m.director == nil || (!m.director.Enrolled && m.director.Alert == ""):
		return "", false
	}
	d := m.director
	text, _ := strings.CutPrefix(d.Line, "Director: ")
	text = m.clean(m.plainWords(text))
	level := styles.OK
	switch {
	case d.Alert != "" || d.State == "revoked" || d.State == "expired":
		level = styles.Failure
	case !d.Running:
		level = styles.Info
	case d.State == "backoff":
		level = styles.Warning
	}
	if level != styles.OK {
		text = s.Badgef(level) + " " + text
	}
	return text, true
}

// plainWords spells the agent's typography in ASCII outside the rich
// tier (the VGA font and a serial line have no middle dot or ellipsis).
func (m *Model) plainWords(s string) string {
	if m.c.Tier == term.Rich {
		return s
	}
	return strings.NewReplacer("·", "-", "…", "~", "—", "-", "–", "-").Replace(s)
}
