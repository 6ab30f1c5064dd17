package diagnostics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/diag"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Sources is what the screen needs from the host.
type Sources struct {
	// Dir is the folder bundles are written to (diag.Dir).
	Dir string
	// Write collects the bundle and writes it into Dir; called from a
	// tea.Cmd with a timeout.
	Write func(ctx context.Context) (diag.Result, error)
}

// LiveSources writes the host bundle through d into its directory. The
// checks take the KVM probe's verdict from this boot's cache: the screen
// never runs guest code.
func LiveSources(d *diag.Service) Sources {
	return Sources{
		Dir:   d.Dir(),
		Write: func(ctx context.Context) (diag.Result, error) { return d.WriteInDir(ctx, time.Now()) },
	}
}

// writeTimeout bounds a bundle: the inventory, the checks (QEMU's
// version, a cold probe cache) and the compression.
const writeTimeout = 2 * time.Minute

type writtenMsg struct {
	res diag.Result
	err error
}

// KeyMap is the screen's keys; none is a letter the global map reserves.
type KeyMap struct{ Write key.Binding }

var _ keys.Map = KeyMap{}

// DefaultKeyMap returns the screen's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		// b for "bundle"; d, the global diagnostics key, is taken
		Write: keys.On("enter", "b").Help("enter/b", "write bundle"),
	}
}

// ShortHelp is the screen's legend.
func (k KeyMap) ShortHelp() []key.Binding { return []key.Binding{k.Write} }

// FullHelp is the screen's help.
func (k KeyMap) FullHelp() [][]key.Binding { return [][]key.Binding{{k.Write}} }

// Model is the Diagnostics screen.
type Model struct {
	c    common.Common
	src  Sources
	keys KeyMap

	running bool
	started time.Time
	took    time.Duration
	res     *diag.Result
	err     error
	// note is a one-line answer to the last key (refusals, "already writing").
	note      string
	noteLevel styles.Level
}

var _ common.Screen = (*Model)(nil)

// New returns the Diagnostics screen.
func New(c common.Common, src Sources) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	m := &Model{c: c, src: src, keys: DefaultKeyMap()}
	m.SetSize(76, 17)
	return m
}

// Title names the screen.
func (m *Model) Title() string { return "Diagnostics" }

// CLI is the command that writes the same bundle. `virt diagnostics`
// names the file as this screen does, in the current directory; a cd
// keeps the line inside the frame, where -o with the whole path would be
// cut off.
func (m *Model) CLI() string {
	return "cd " + common.ShellQuote(m.src.Dir) + " && virt diagnostics"
}

// Capturing: no field or dialog.
func (m *Model) Capturing() bool { return false }

// ShortHelp is the screen's part of the legend.
func (m *Model) ShortHelp() []key.Binding { return m.keys.ShortHelp() }

// FullHelp is the screen's help.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// SetSize sets the content area.
func (m *Model) SetSize(w, h int) { m.c.Width, m.c.Height = max(w, 20), max(h, 4) }

// Init does nothing: the screen writes only when asked.
func (m *Model) Init() tea.Cmd { return nil }

// Running reports whether a bundle is being written.
func (m *Model) Running() bool { return m.running }

// Update handles the key and the write's result; it never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		if key.Matches(msg, m.keys.Write) {
			return m, m.write()
		}
	case writtenMsg:
		m.running = false
		m.took = m.c.Now().Sub(m.started)
		m.note = ""
		if msg.err != nil {
			m.err, m.res = msg.err, nil
			if m.c.Logger != nil {
				m.c.Logger.Warn("diagnostics: bundle failed", "err", msg.err)
			}
			return m, nil
		}
		res := msg.res
		m.err, m.res = nil, &res
		if m.c.Logger != nil {
			m.c.Logger.Info("diagnostics: bundle written", "path", res.Path, "bytes", res.Size, "user", m.c.Session.User)
		}
	}
	return m, nil
}

func (m *Model) write() tea.Cmd {
	switch {
	case !m.c.Session.LoggedIn():
		m.note, m.noteLevel = m.c.Session.ReadOnlyReason(), styles.Warning
		return nil
	case m.running:
		m.note, m.noteLevel = "a bundle is already being written: wait for it to finish", styles.Info
		return nil
	case m.src.Write == nil:
		m.note, m.noteLevel = "no bundle writer configured", styles.Failure
		return nil
	}
	m.running, m.started, m.note = true, m.c.Now(), ""
	f, parent := m.src.Write, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, writeTimeout)
		defer cancel()
		res, err := f(ctx)
		return writtenMsg{res, err}
	}
}

// View draws the content area.
func (m *Model) View() tea.View {
	s := m.c.Styles
	lines := []string{
		s.Section.Render("SUPPORT BUNDLE"),
		"  The host inventory, the health checks and the versions of virtcon,",
		"  QEMU and the kernel in one tar.gz, secrets redacted, for a support case.",
		"  " + s.Label.Render("Folder ") + " " + m.clean(m.src.Dir) + s.Muted.Render("  (root only)"),
		"",
		"  Press " + s.HelpKey.Render("enter") + " or " + s.HelpKey.Render("b") + " to write a bundle.",
		"",
	}
	lines = append(lines, m.state()...)
	body := m.c.Height - 1
	if len(lines) > body {
		lines = lines[:body]
	}
	for len(lines) < body {
		lines = append(lines, "")
	}
	if m.note != "" {
		lines = append(lines, s.Badgef(m.noteLevel)+" "+m.note)
	}
	return tea.NewView(common.Fit(lines, m.c.Width, m.c.Height, s.Ellipsis))
}

func (m *Model) state() []string {
	s := m.c.Styles
	switch {
	case m.running:
		secs := int(m.c.Now().Sub(m.started).Seconds())
		return []string{"  " + s.Badgef(styles.Info) + fmt.Sprintf(" writing the bundle%s %ds", dots(s), secs),
			"         " + s.Muted.Render("collecting the inventory and running the checks")}
	case m.err != nil:
		lines := []string{"  " + s.Badgef(styles.Failure) + " the bundle was not written:"}
		return append(lines, m.wrap(m.clean(m.err.Error()), 4)...)
	case m.res != nil:
		r := m.res
		lines := []string{"  " + s.Badgef(styles.OK) + fmt.Sprintf(" wrote %s (%d bytes) in %s:", size(r.Size), r.Size, m.took.Round(time.Second))}
		lines = append(lines, m.hardwrap(m.clean(r.Path), 4)...)
		lines = append(lines, "  "+s.Label.Render("Parts  ")+" "+m.clean(strings.Join(r.Files, ", ")))
		return append(lines, "  "+s.Muted.Render("copy it off the host with scp or sftp; it is readable by root only"))
	}
	return []string{"  " + s.Muted.Render("no bundle written from this console yet")}
}

func (m *Model) wrap(text string, indent int) []string {
	var out []string
	for _, l := range strings.Split(ansi.Wrap(text, max(m.c.Width-indent, 10), "/-"), "\n") {
		out = append(out, strings.Repeat(" ", indent)+l)
	}
	return out
}

// hardwrap breaks a path anywhere: a path has no spaces to break at.
func (m *Model) hardwrap(text string, indent int) []string {
	var out []string
	for _, l := range strings.Split(ansi.Hardwrap(text, max(m.c.Width-indent, 10), true), "\n") {
		out = append(out, strings.Repeat(" ", indent)+l)
	}
	return out
}

// clean makes host text (paths, errors) safe to draw, ASCII only in the
// plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

func size(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}
