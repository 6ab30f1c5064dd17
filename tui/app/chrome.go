package app

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// View renders the whole screen on the alternate screen.
func (m *Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	return v
}

// Render is the screen as exactly Height lines of Width cells.
func (m *Model) Render() string {
	s := m.c.Styles
	w, h := term.Size(m.c.Width, m.c.Height)
	cw, ch := m.contentSize()
	var content string
	switch {
	case m.quitting:
		content = common.Fit(m.quitLines(), cw, ch, s.Ellipsis)
	case m.showHelp:
		content = common.Fit(m.helpLines(), cw, ch, s.Ellipsis)
	case m.mode == modeLogin && m.form != nil:
		content = common.Fit(m.form.lines(m.busy, m.opts.TTY, m.opts.AdminGroup), cw, ch, s.Ellipsis)
	case m.current() != nil:
		content = common.Fit(strings.Split(m.current().View().Content, "\n"), cw, ch, s.Ellipsis)
	default:
		// locked: the message line says so; the status stays whole
		content = m.status.Content(cw, ch)
	}
	// rows keep one space inside each side of the frame
	rows := []string{m.header(w - 4), m.tabs(w - 4)}
	rows = append(rows, strings.Split(content, "\n")...)
	rows = append(rows, m.messageLine(), m.cliLine(), m.screenLegend(), m.globalLegend())
	for i, r := range rows {
		r = " " + r
		if lipgloss.Width(r) > w-2 {
			r = ansi.Truncate(r, w-2, s.Ellipsis)
		}
		if pad := w - 2 - lipgloss.Width(r); pad > 0 {
			r += strings.Repeat(" ", pad)
		}
		rows[i] = r
	}
	for len(rows) < h-2 {
		rows = append(rows, strings.Repeat(" ", max(w-2, 0)))
	}
	return s.Frame.Render(strings.Join(rows[:max(h-2, 1)], "\n"))
}

func (m *Model) hostname() string {
	if n := m.status.Hostname(); n != "" {
		return n
	}
	return m.opts.Hostname
}

func (m *Model) header(w int) string {
	s := m.c.Styles
	product := m.opts.Product
	if product == "" {
		product = "virtcon"
	}
	title := "Status"
	switch {
	case m.quitting:
		title = "Quit"
	case m.showHelp:
		title = "Help"
	case m.mode == modeLogin:
		title = "Log in"
	case m.mode == modeLocked:
		title = "Locked"
	case m.current() != nil:
		title = m.current().Title()
	}
	left := s.Title.Render(product+" "+m.opts.Version) + " " + s.Muted.Render("|") + " " + s.Section.Render(title)
	who := "not logged in"
	if se := m.c.Session; se.LoggedIn() {
		// the lock's state only once it is known: right after a login
		// the acquisition is in flight, and [RO] would be a false alarm
		who = se.User + "@" + orDash(m.opts.TTY)
		switch {
		case se.Writer:
			who += " [RW]"
		case m.lockKnown:
			who += " [RO]"
		}
	}
	right := m.hostname() + "  " + who + "  " + m.c.Now().Format("15:04:05")
	gap := w - lipgloss.Width(left) - lipgloss.Width(right)
	if gap < 1 {
		right = who + "  " + m.c.Now().Format("15:04:05")
		gap = max(w-lipgloss.Width(left)-lipgloss.Width(right), 1)
	}
	return left + strings.Repeat(" ", gap) + right
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tabs is the page line: every page with its keys; the visible one
// bracketed (colour is never the only signal).
func (m *Model) tabs(w int) string {
	s := m.c.Styles
	if m.mode != modePages {
		return s.Muted.Render(strings.Repeat(sepRune(s), max(w, 1)))
	}
	items := []string{tabItem(s, m.c.Keys.Status.Help().Key, "Status", m.page == -1)}
	for i, p := range m.pages {
		items = append(items, tabItem(s, p.Key.Help().Key, p.Tab, i == m.page))
	}
	line := strings.Join(items, " ")
	if lipgloss.Width(line) > w {
		// narrow terminal: letters only
		items = items[:0]
		items = append(items, tabItem(s, lastKey(m.c.Keys.Status), "Status", m.page == -1))
		for i, p := range m.pages {
			items = append(items, tabItem(s, lastKey(p.Key), p.Tab, i == m.page))
		}
		line = strings.Join(items, " ")
	}
	if lipgloss.Width(line) > w {
		// still too wide (eight tabs at 80 columns): the items' own
		// padding is the only space between them
		line = strings.TrimRight(strings.Join(items, ""), " ")
	}
	return line
}

func lastKey(b key.Binding) string {
	k := b.Help().Key
	if i := strings.LastIndex(k, "/"); i >= 0 {
		return k[i+1:]
	}
	return k
}

func sepRune(s *styles.Styles) string {
	if s.Tier == term.Rich {
		return "─"
	}
	return "-"
}

func tabItem(s *styles.Styles, k, name string, active bool) string {
	if active {
		return s.Title.Render("[" + k + " " + name + "]")
	}
	return " " + s.HelpKey.Render(k) + " " + s.HelpDesc.Render(name) + " "
}

// messageLine is the last message. The read-only warning is one of them,
// shown when the state changes (announceReadOnly); the header's [RO] says
// it the rest of the time.
func (m *Model) messageLine() string {
	if m.message != "" {
		return m.c.Styles.Badgef(m.msgLevel) + " " + m.message
	}
	if m.opts.KernelConsole {
		return m.c.Styles.Muted.Render(m.kernelHint())
	}
	return ""
}

// kernelHint says, on a console the kernel prints on, that its messages
// may appear over the screen, how the screen mends and where to read
// them (docs/dcui.md, "Kernel messages").
func (m *Model) kernelHint() string {
	if m.opts.Repaint > 0 {
		return "Kernel messages may print here; repainted every " + shortDuration(m.opts.Repaint) + ". Read them: dmesg"
	}
	return "Kernel messages may print here; ^L repaints. Read them: dmesg"
}

func shortDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return fmt.Sprintf("%gs", d.Seconds())
}

func (m *Model) cliLine() string {
	s := m.c.Styles
	cli := ""
	switch {
	case m.quitting:
		cli = "virt net confirm   (roll back: virt net rollback)"
	case m.mode == modeLogin || m.showHelp:
	case m.current() != nil:
		cli = m.current().CLI()
	default:
		cli = "virt host check; virt vm list"
	}
	if cli == "" {
		return ""
	}
	// names in it come from the host (NICs, bridges, VMs)
	return s.Muted.Render("CLI:") + " " + common.Clean(cli, m.c.Tier == term.Plain)
}

func legend(s *styles.Styles, bs []key.Binding) string {
	var parts []string
	for _, b := range bs {
		if !b.Enabled() || b.Help().Key == "" {
			continue
		}
		parts = append(parts, s.HelpKey.Render(b.Help().Key)+" "+s.HelpDesc.Render(b.Help().Desc))
	}
	return strings.Join(parts, "  ")
}

func (m *Model) screenLegend() string {
	s := m.c.Styles
	switch {
	case m.quitting:
		return legend(s, common.ConfirmHelp("quit anyway"))
	case m.showHelp:
		return legend(s, []key.Binding{key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "close help"))})
	case m.mode == modeLogin:
		return legend(s, []key.Binding{
			key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "log in")),
			key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next field")),
			key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),
		})
	case m.current() != nil:
		return legend(s, m.current().ShortHelp())
	}
	return legend(s, []key.Binding{m.c.Keys.Refresh})
}

func (m *Model) globalLegend() string {
	s := m.c.Styles
	k := m.c.Keys
	bs := []key.Binding{k.Help}
	switch m.mode {
	case modePages:
		bs = append(bs, k.Lock, k.Logout)
	case modeLogin:
	default:
		bs = append(bs, k.Login)
		if len(m.pages) > 0 {
			bs = append(bs, key.NewBinding(key.WithKeys(""), key.WithHelp("F3-F11", "pages after login")))
		}
	}
	if !m.opts.Kiosk {
		bs = append(bs, k.Quit)
	}
	bs = append(bs, k.Redraw)
	return legend(s, bs)
}
