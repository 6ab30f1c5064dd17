package director

import (
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
)

// label is the width of the field names.
const label = 12

// View draws the content area.
func (m *Model) View() tea.View {
	s := m.c.Styles
	var lines []string
	switch m.step {
	case stepPaste:
		lines = m.pasteLines()
	case stepConfirm:
		lines = m.confirmLines()
	default:
		lines = m.statusLines()
		if r := m.resultLines(); len(r) > 0 {
			lines = append(lines, "")
			lines = append(lines, r...)
		}
	}
	// the note (or the read-only reason) sits at the bottom, wrapped
	var note []string
	switch {
	case m.note != "":
		note = m.badged(0, m.noteLevel, m.note)
	case !m.c.Session.CanWrite() && m.step == stepNone && !inGoodStanding(m.st, m.c.Now()):
		note = m.badged(0, styles.Info, m.c.Session.ReadOnlyReason())
	}
	body := max(m.c.Height-len(note), 0)
	if len(lines) > body {
		lines = lines[:body]
	}
	for len(lines) < body {
		lines = append(lines, "")
	}
	lines = append(lines, note...)
	return tea.NewView(common.Fit(lines, m.c.Width, m.c.Height, s.Ellipsis))
}

func (m *Model) row(name, value string) string {
	return "  " + m.c.Styles.Label.Render(fmt.Sprintf("%-*s", label, name)) + " " + value
}

// statusLines is the agent's status.
func (m *Model) statusLines() []string {
	s := m.c.Styles
	lines := []string{s.Section.Render("DIRECTOR")}
	switch {
	case !m.loaded:
		return append(lines, "  "+s.Muted.Render("reading the agent's status"+dots(s)))
	case m.stErr != nil:
		return append(lines, m.badged(2, styles.Unknown, "the agent's status could not be read: "+m.clean(m.stErr.Error()))...)
	case m.st == nil || !m.st.Enrolled:
		lines = append(lines, m.row("Enrolment", "not enrolled: this host runs on its own"))
		if m.st != nil && m.st.Alert != "" {
			lines = append(lines, m.alertLines(m.st)...)
		}
		return append(lines, "",
			"  A director watches many hosts from one place. To enrol this one, ask the",
			"  director's admin for a join string (virt-director token create), then",
			"  press "+s.HelpKey.Render("e")+" and paste it here.")
	}
	st, now := m.st, m.c.Now()
	if st.Alert != "" {
		lines = append(lines, m.alertLines(st)...)
		lines = append(lines, "         "+s.Hint.Render("Press e to enrol again with a new join string."))
	}
	lines = append(lines,
		m.row("Enrolment", "enrolled with "+m.clean(orDash(st.Director))),
		m.row("Node", m.clean(orDash(st.NodeID))),
	)
	lines = append(lines, m.pinRows(st.Pin)...)
	lines = append(lines,
		m.row("Certificate", m.certText(st, now)),
		s.Section.Render("AGENT"),
		m.row("Session", m.sessionText(st)),
	)
	if !st.Running && st.State != StateRevoked && st.State != StateExpired && st.Alert == "" && m.done == nil {
		lines = append(lines, m.row("Start", s.Value.Render(StartCommand)+" "+s.Muted.Render("(or "+AltStart+")")))
	}
	if st.Running {
		hb := "none answered yet"
		if !st.LastHeartbeatAck.IsZero() {
			hb = "last answered " + st.LastHeartbeatAck.In(now.Location()).Format(time.TimeOnly) + " (" + since(now.Sub(st.LastHeartbeatAck)) + " ago)"
		}
		lines = append(lines, m.row("Heartbeat", hb))
	}
	if st.LastError != "" {
		lines = append(lines, m.row("Last error", m.clean(st.LastError)))
	}
	return lines
}

// pinRows is the CA pin whole, on two rows: it is for comparing.
func (m *Model) pinRows(pin string) []string {
	hex, ok := strings.CutPrefix(pin, "sha256:")
	if !ok || len(hex) != 64 {
		return []string{m.row("CA pin", m.clean(orDash(pin)))}
	}
	return []string{m.row("CA pin", "sha256:"+hex[:32]), m.row("", "       "+hex[32:])}
}

// alertLines is the dead credential's alert: what, since when, and the
// promise that matters (the VMs were left alone), then the reason.
func (m *Model) alertLines(st *Status) []string {
	s := m.c.Styles
	what := "REVOKED"
	if st.Alert == AlertExpired {
		what = "certificate EXPIRED"
	} else if st.Alert != AlertRevoked {
		what = strings.ToUpper(m.clean(st.Alert))
	}
	at := "?"
	if !st.AlertAt.IsZero() {
		at = st.AlertAt.In(m.c.Now().Location()).Format("2006-01-02 15:04")
	}
	lines := m.badged(2, styles.Failure, what+" at "+at+" "+dash(s)+" VMs untouched; re-enrol")
	if st.AlertReason != "" {
		lines = append(lines, "         "+s.Muted.Render("reason: "+m.clean(st.AlertReason)))
	}
	return lines
}

// dash is the tier's dash: an em dash where the font has one.
func dash(s *styles.Styles) string {
	if s.Ellipsis == "…" {
		return "—"
	}
	return "-"
}

func (m *Model) certText(st *Status, now time.Time) string {
	s := m.c.Styles
	if st.CertNotAfter.IsZero() {
		return s.Muted.Render("unknown")
	}
	at := st.CertNotAfter.In(now.Location()).Format("2006-01-02 15:04")
	if !now.Before(st.CertNotAfter) {
		return s.Badgef(styles.Failure) + " expired " + at + " (" + since(now.Sub(st.CertNotAfter)) + " ago): re-enrol"
	}
	return "valid until " + at + " (in " + since(st.CertNotAfter.Sub(now)) + ")"
}

func (m *Model) sessionText(st *Status) string {
	s := m.c.Styles
	if !st.Running {
		switch st.State {
		case StateRevoked, StateExpired:
			return s.Badgef(styles.Failure) + " " + st.State + ": the agent stopped and will not reconnect"
		}
		return s.Badgef(styles.Info) + " agent not running"
	}
	switch st.State {
	case StateConnected:
		return s.Badgef(styles.OK) + " connected to " + m.clean(orDash(st.Director))
	case StateConnecting:
		return s.Badgef(styles.Info) + " connecting to " + m.clean(orDash(st.Director)) + dots(s)
	case StateBackoff:
		return s.Badgef(styles.Warning) + " not connected: retrying " + m.clean(orDash(st.Director)) + " after a pause"
	case StateRevoked, StateExpired:
		return s.Badgef(styles.Failure) + " " + st.State + ": the agent stops and will not reconnect"
	case StateStopped:
		return s.Badgef(styles.Info) + " stopping"
	}
	return s.Badgef(styles.Unknown) + " " + m.clean(orDash(st.State))
}

// resultLines is the enrolment in flight or its outcome.
func (m *Model) resultLines() []string {
	s := m.c.Styles
	switch {
	case m.step == stepEnrolling:
		text := "enrolling with " + m.clean(m.enrollAddr) + dots(s)
		if d := m.c.Now().Sub(m.enrollSince); d >= time.Second {
			text += " " + since(d)
		}
		return m.badged(2, styles.Info, text)
	case m.doneErr != nil:
		// the agent's errors never contain the secret
		return m.badged(2, styles.Failure, "enrolment failed: "+m.clean(m.doneErr.Error()))
	case m.done != nil:
		lines := m.badged(2, styles.OK, "enrolled with "+m.clean(orDash(m.done.Director)))
		if m.done.NodeID != "" {
			lines = append(lines, "         as node "+m.clean(m.done.NodeID))
		}
		if m.st == nil || !m.st.Running {
			lines = append(lines,
				"         Start the agent so that this host connects:",
				"           "+s.Value.Render(StartCommand),
				"         "+s.Muted.Render("(where systemd does not run: "+AltStart+")"))
		}
		return lines
	}
	if !inGoodStanding(m.st, m.c.Now()) && m.loaded && m.stErr == nil {
		return []string{"  " + s.HelpKey.Render("e") + "  " + s.Selected.Render("Enrol") + " " + s.Muted.Render("paste a join string from the director's admin")}
	}
	return nil
}

// pasteLines is the masked field.
func (m *Model) pasteLines() []string {
	s := m.c.Styles
	n := len([]rune(m.field.Value()))
	count := ""
	if n > 0 {
		count = "  " + s.Muted.Render(plural(n, "character"))
	}
	lines := []string{
		s.Section.Render("ENROL THIS HOST"),
		"  Paste the join string the director's admin got from virt-director token",
		"  create. It holds a secret, so it is never shown: only its length is.",
		"",
		"  " + s.Label.Render(fmt.Sprintf("%-*s", label, "Join string")) + " [" + padRight(m.field.View(), m.field.Width()) + "]" + count,
		"",
	}
	if m.parseErr != nil {
		lines = append(lines, m.badged(2, styles.Failure, m.clean(m.parseErr.Error()))...)
	}
	return lines
}

// confirmLines shows where the join string leads, to check before y.
func (m *Model) confirmLines() []string {
	s := m.c.Styles
	pin := m.join.Pin()
	shown := pin
	if hex, ok := strings.CutPrefix(pin, "sha256:"); ok && len(hex) > pinShown {
		shown = "sha256:" + hex[:pinShown] + s.Ellipsis
	}
	return []string{
		s.Section.Render("ENROL THIS HOST"),
		m.row("Director", m.clean(m.join.Addr())),
		m.row("Token", m.clean(m.join.ID())+" "+s.Muted.Render("(its secret is not shown)")),
		m.row("CA pin", s.Value.Render(m.clean(shown))+"  "+s.Muted.Render(fmt.Sprintf("the first %d of its 64 hex digits", pinShown))),
		"",
		"  " + s.Title.Render("Check this pin with the director's admin."),
		"  Only a director whose CA has it is trusted; nothing is sent to the",
		"  address before that is checked.",
		"",
		"  " + common.ConfirmPrompt(s, "enrol with "+m.clean(m.join.Addr())),
	}
}

// badged is "[WARN] text" at indent with the text wrapped under itself
// to the width.
func (m *Model) badged(indent int, l styles.Level, text string) []string {
	s := m.c.Styles
	pad := strings.Repeat(" ", indent)
	wrapped := strings.Split(ansi.Wrap(text, max(m.c.Width-indent-7, 10), "-"), "\n")
	out := []string{pad + s.Badgef(l) + " " + wrapped[0]}
	for _, w := range wrapped[1:] {
		out = append(out, pad+"       "+w)
	}
	return out
}

// since is a duration as a person reads it: 42s, 5m, 3h, 12 days.
func since(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d/time.Second), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return plural(int(d/(24*time.Hour)), "day")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func padRight(s string, w int) string {
	if pad := w - lipgloss.Width(s); pad > 0 {
		s += strings.Repeat(" ", pad)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}
