package power

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/host"
	hostpower "github.com/virtcon/virtcon/power"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/vm"
)

// Sources are the screen's dependencies; each is called from a tea.Cmd.
type Sources struct {
	// VMs lists the VMs (vm.Manager.List), for the running-VM warning.
	VMs func(ctx context.Context) ([]vm.Entry, error)
	// Plan words what the host policy does to the running VMs when the
	// host goes down (host.Policy.ShutdownPlan); with host.yaml's error
	// when it did not load (the defaults' plan then).
	Plan func() (string, error)
	// ShutdownGuests takes the running VMs down before the host goes down
	// (host.Host.ShutdownGuests), telling progress as it goes; nil: the
	// host goes down without it.
	ShutdownGuests func(ctx context.Context, progress func(host.ShutdownProgress)) (*host.ShutdownReport, error)
	// Reboot and PowerOff take the host down (power.Reboot, power.PowerOff).
	Reboot   func(ctx context.Context) error
	PowerOff func(ctx context.Context) error
}

// LiveSources lists and shuts down the host's VMs and reboots or powers
// off this machine for real.
func LiveSources(h *host.Host) Sources {
	return Sources{
		VMs: h.VMs.List,
		Plan: func() (string, error) {
			p, err := host.LoadPolicy(h.Layout)
			if err != nil {
				return host.DefaultPolicy().ShutdownPlan(), err
			}
			return p.ShutdownPlan(), nil
		},
		ShutdownGuests: func(ctx context.Context, progress func(host.ShutdownProgress)) (*host.ShutdownReport, error) {
			return h.ShutdownGuests(ctx, host.ShutdownOptions{Progress: progress})
		},
		Reboot:   func(ctx context.Context) error { return h.Power.Do(ctx, hostpower.ActionReboot) },
		PowerOff: func(ctx context.Context) error { return h.Power.Do(ctx, hostpower.ActionPowerOff) },
	}
}

const (
	loadTimeout   = 30 * time.Second
	actionTimeout = time.Minute
	// reloadEvery keeps the running count fresh while the screen is shown.
	reloadEvery = 5
	// maxNames is how many running VMs the warning names.
	maxNames = 5
)

type (
	vmsMsg struct {
		vms     []vm.Entry
		err     error
		plan    string
		planErr error
	}
	actionMsg struct {
		a   hostpower.Action
		err error
	}
	// the guests' shutdown before the action: its steps, then its end
	shutdownStepMsg struct {
		p    host.ShutdownProgress
		next tea.Cmd
	}
	shutdownDoneMsg struct {
		a   hostpower.Action
		rep *host.ShutdownReport
		err error
	}
)

// KeyMap is the screen's keys; none is a letter the global map reserves.
type KeyMap struct {
	Up, Down, Open, Reboot, PowerOff key.Binding
}

var _ keys.Map = KeyMap{}

// DefaultKeyMap returns the screen's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Up:       keys.On("up", "k").Help("up/k", "select"),
		Down:     keys.On("down", "j").Help("down/j", "select"),
		Open:     keys.On("enter").Help("enter", "choose"),
		Reboot:   keys.On("b").Help("b", "reboot host"),
		PowerOff: keys.On("o").Help("o", "power off host"),
	}
}

// ShortHelp is the legend of the action list.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Reboot, k.PowerOff, k.Down, k.Open}
}

// FullHelp is the screen's help: the list and the confirmation.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Reboot, k.PowerOff, k.Up, k.Down, k.Open}, common.ConfirmHelp("reboot or power off")}
}

// Model is the Power screen.
type Model struct {
	c    common.Common
	src  Sources
	keys KeyMap

	sel Action // the highlighted action

	vms       []vm.Entry
	vmErr     error
	vmsLoaded bool
	vmsBusy   bool
	ticks     int
	plan      string // what happens to the running VMs (host policy)
	planErr   error  // host.yaml did not load: the defaults apply

	// the guests' shutdown that runs before the action
	shutting bool
	step     *host.ShutdownProgress // the latest
	ended    *host.ShutdownOutcome  // the latest VM done
	shutRep  *host.ShutdownReport

	// dialog is the action awaiting confirmation, nil when none.
	dialog *Action
	acting bool
	done   *Action // requested successfully: the host is going down
	actErr error

	note      string
	noteLevel styles.Level
}

// Action is one of the screen's two actions.
type Action = hostpower.Action

var _ common.Screen = (*Model)(nil)

// New returns the Power screen.
func New(c common.Common, src Sources) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	m := &Model{c: c, src: src, keys: DefaultKeyMap(), sel: hostpower.ActionReboot}
	m.SetSize(76, 17)
	return m
}

// Title names the screen.
func (m *Model) Title() string { return "Power" }

// CLI is the command for the action in the dialog, else the selected one.
func (m *Model) CLI() string {
	a := m.sel
	if m.dialog != nil {
		a = *m.dialog
	}
	return "virt host " + a.String() + " --yes"
}

// Capturing is true while the confirmation dialog is open: every key is
// the dialog's (y confirms, any other cancels).
func (m *Model) Capturing() bool { return m.dialog != nil }

// ShortHelp is the screen's part of the legend.
func (m *Model) ShortHelp() []key.Binding {
	if m.dialog != nil {
		return common.ConfirmHelp(verb(*m.dialog))
	}
	return m.keys.ShortHelp()
}

// FullHelp is the screen's help.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// SetSize sets the content area.
func (m *Model) SetSize(w, h int) { m.c.Width, m.c.Height = max(w, 20), max(h, 4) }

// Init does nothing: the app activates the screen when it is shown.
func (m *Model) Init() tea.Cmd { return nil }

func (m *Model) loadVMs() tea.Cmd {
	if m.vmsBusy || m.src.VMs == nil {
		return nil
	}
	m.vmsBusy = true
	f, plan, parent := m.src.VMs, m.src.Plan, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, loadTimeout)
		defer cancel()
		vms, err := f(ctx)
		msg := vmsMsg{vms: vms, err: err, plan: host.DefaultPolicy().ShutdownPlan()}
		if plan != nil {
			msg.plan, msg.planErr = plan()
		}
		return msg
	}
}

// Update handles keys and results; it never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case common.ActivateMsg, common.RefreshMsg:
		return m, m.loadVMs()
	case common.TickMsg:
		m.ticks++
		if m.ticks%reloadEvery == 0 {
			return m, m.loadVMs()
		}
	case vmsMsg:
		m.vmsBusy, m.vmsLoaded = false, true
		m.vms, m.vmErr = msg.vms, msg.err
		m.plan, m.planErr = msg.plan, msg.planErr
		if msg.err != nil && m.c.Logger != nil {
			m.c.Logger.Warn("power: list VMs", "err", msg.err)
		}
	case shutdownStepMsg:
		p := msg.p
		m.step = &p
		if p.VM.Outcome != "" {
			o := p.VM
			m.ended = &o
		}
		return m, msg.next
	case shutdownDoneMsg:
		m.shutting, m.shutRep = false, msg.rep
		if msg.rep == nil {
			// nothing was stopped: going down now would kill the guests
			m.acting = false
			m.actErr = fmt.Errorf("%s not done: the VMs could not be shut down first: %w", verb(msg.a), msg.err)
			if m.c.Logger != nil {
				m.c.Logger.Error("power: shutdown-guests failed", "err", msg.err)
			}
			return m, nil
		}
		if msg.err != nil && m.c.Logger != nil {
			m.c.Logger.Warn("power: shutdown-guests", "err", msg.err)
		}
		return m, m.powerCmd(msg.a)
	case actionMsg:
		m.acting = false
		if msg.err != nil {
			m.actErr = msg.err
			if m.c.Logger != nil {
				m.c.Logger.Error("power: action failed", "action", msg.a.String(), "err", msg.err)
			}
			return m, nil
		}
		a := msg.a
		m.done, m.actErr = &a, nil
	case tea.KeyPressMsg:
		if m.dialog != nil {
			return m, m.dialogKey(msg)
		}
		return m, m.key(msg)
	}
	return m, nil
}

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	k := m.keys
	switch {
	case key.Matches(msg, k.Up), key.Matches(msg, k.Down):
		if m.sel == hostpower.ActionReboot {
			m.sel = hostpower.ActionPowerOff
		} else {
			m.sel = hostpower.ActionReboot
		}
	case key.Matches(msg, k.Reboot):
		m.sel = hostpower.ActionReboot
		return m.open(m.sel)
	case key.Matches(msg, k.PowerOff):
		m.sel = hostpower.ActionPowerOff
		return m.open(m.sel)
	case key.Matches(msg, k.Open):
		return m.open(m.sel)
	}
	return nil
}

// open shows the confirmation dialog, or says why not; it refreshes the
// VM list so the count in the dialog is current.
func (m *Model) open(a Action) tea.Cmd {
	m.note = ""
	switch {
	case !m.c.Session.CanWrite():
		m.note, m.noteLevel = verb(a)+" refused: "+m.c.Session.ReadOnlyReason(), styles.Warning
		return nil
	case m.acting || m.done != nil:
		m.note, m.noteLevel = "the host is already going down", styles.Info
		return nil
	}
	m.dialog = &a
	m.actErr = nil
	return m.loadVMs()
}

// dialogKey answers the dialog as every confirmation does: y goes ahead,
// any other key cancels (so a stray enter never takes the host down).
func (m *Model) dialogKey(msg tea.KeyPressMsg) tea.Cmd {
	a := *m.dialog
	m.dialog = nil
	if !common.Confirmed(msg) {
		m.note, m.noteLevel = verb(a)+" cancelled", styles.Info
		return nil
	}
	if !m.c.Session.CanWrite() {
		// the lock may have moved while the dialog was open
		m.note, m.noteLevel = verb(a)+" refused: "+m.c.Session.ReadOnlyReason(), styles.Warning
		return nil
	}
	return m.act(a)
}

func (m *Model) act(a Action) tea.Cmd {
	f := m.src.Reboot
	if a == hostpower.ActionPowerOff {
		f = m.src.PowerOff
	}
	if f == nil {
		m.note, m.noteLevel = verb(a)+" is not available on this console", styles.Failure
		return nil
	}
	m.acting = true
	if m.c.Logger != nil {
		m.c.Logger.Warn("power: confirmed", "action", a.String(), "user", m.c.Session.User, "tty", m.c.Session.TTY,
			"running_vms", len(hostpower.Running(m.vms)))
	}
	if m.src.ShutdownGuests == nil {
		return m.powerCmd(a)
	}
	m.shutting, m.step, m.ended, m.shutRep = true, nil, nil, nil
	return m.shutdownCmd(a)
}

// shutdownCmd takes the guests down first. Its steps come back one
// message at a time, each carrying the command that waits for the next;
// a step the screen has not drawn yet when the next comes is dropped
// (the shutdown never waits for the screen), the end never is.
func (m *Model) shutdownCmd(a Action) tea.Cmd {
	f, parent := m.src.ShutdownGuests, m.c.Ctx
	steps := make(chan host.ShutdownProgress, 1)
	done := make(chan shutdownDoneMsg, 1)
	var next tea.Cmd
	next = func() tea.Msg {
		select {
		case p := <-steps:
			return shutdownStepMsg{p, next}
		case d := <-done:
			select {
			case p := <-steps: // the last step before the end
				done <- d
				return shutdownStepMsg{p, next}
			default:
			}
			return d
		}
	}
	return func() tea.Msg {
		go func() {
			// the shutdown bounds itself (the policy's timeout); the
			// session's end cuts it short
			rep, err := f(parent, func(p host.ShutdownProgress) {
				select {
				case steps <- p:
				default:
					select { // replace the undrawn step with this one
					case <-steps:
					default:
					}
					select {
					case steps <- p:
					default:
					}
				}
			})
			done <- shutdownDoneMsg{a, rep, err}
		}()
		return next()
	}
}

func (m *Model) powerCmd(a Action) tea.Cmd {
	f := m.src.Reboot
	if a == hostpower.ActionPowerOff {
		f = m.src.PowerOff
	}
	parent := m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, actionTimeout)
		defer cancel()
		return actionMsg{a, f(ctx)}
	}
}

func verb(a Action) string {
	if a == hostpower.ActionPowerOff {
		return "power off"
	}
	return "reboot"
}

// View draws the content area.
func (m *Model) View() tea.View {
	s := m.c.Styles
	lines := []string{s.Section.Render("HOST POWER")}
	for _, a := range []Action{hostpower.ActionReboot, hostpower.ActionPowerOff} {
		lines = append(lines, m.actionLine(a))
	}
	lines = append(lines, "")
	if m.dialog != nil {
		lines = append(lines, m.dialogLines(*m.dialog)...)
	} else {
		lines = append(lines, s.Section.Render("VIRTUAL MACHINES"))
		if state := m.stateLines(); m.acting || m.done != nil {
			// what runs now is the shutdown's to tell
			lines = append(lines, state...)
		} else {
			lines = append(lines, m.vmLines(2, m.c.Width)...)
			lines = append(lines, "")
			lines = append(lines, state...)
		}
	}
	// the note (or the read-only reason) sits at the bottom, wrapped
	var note []string
	if m.note != "" {
		note = m.badged(0, m.c.Width, m.noteLevel, m.note)
	} else if !m.c.Session.CanWrite() {
		note = m.badged(0, m.c.Width, styles.Info, m.c.Session.ReadOnlyReason())
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

func (m *Model) actionLine(a Action) string {
	s := m.c.Styles
	k, name, what := "b", "Reboot", "restart the host"
	if a == hostpower.ActionPowerOff {
		k, name, what = "o", "Power off", "shut the host down (it stays off until powered on)"
	}
	cursor := "  "
	label := fmt.Sprintf("%-10s", name)
	if a == m.sel {
		// the cursor marks the selection in every tier, colour only adds
		cursor = "> "
		label = s.Selected.Render(label)
	}
	return "  " + cursor + s.HelpKey.Render(k) + "  " + label + " " + s.Muted.Render(what)
}

// vmLines is the running-VM warning, indented, for width cells.
func (m *Model) vmLines(indent, width int) []string {
	s := m.c.Styles
	pad := strings.Repeat(" ", indent)
	switch {
	case !m.vmsLoaded:
		return []string{pad + s.Muted.Render("checking for running VMs"+dots(s))}
	case m.vmErr != nil && len(m.vms) == 0:
		return m.badged(indent, width, styles.Unknown, "could not list the VMs ("+m.clean(m.vmErr.Error())+"); the host does not go down before they can be shut down")
	}
	running := hostpower.Running(m.vms)
	var lines []string
	if len(running) == 0 {
		lines = []string{pad + s.Badgef(styles.OK) + " no VM is running"}
	} else {
		// VM names are host text: an EXTERNAL guest's comes from any argv
		lines = m.badged(indent, width, styles.Info, m.clean(hostpower.Warning(running, maxNames, m.plan)))
	}
	if m.planErr != nil {
		lines = append(lines, m.badged(indent, width, styles.Warning, "host.yaml not loaded, so the defaults apply: "+m.clean(m.planErr.Error()))...)
	}
	return lines
}

// badged is "[WARN] text" at indent with the text wrapped under itself
// to width cells.
func (m *Model) badged(indent, width int, l styles.Level, text string) []string {
	s := m.c.Styles
	pad := strings.Repeat(" ", indent)
	wrapped := strings.Split(ansi.Wrap(text, max(width-indent-7, 10), "-"), "\n")
	out := []string{pad + s.Badgef(l) + " " + wrapped[0]}
	for _, w := range wrapped[1:] {
		out = append(out, pad+"       "+w)
	}
	return out
}

func (m *Model) stateLines() []string {
	s := m.c.Styles
	switch {
	case m.shutting:
		return m.shutdownLines()
	case m.acting:
		return append(m.shutdownSummary(), "  "+s.Badgef(styles.Info)+" asking the system to go down"+dots(s))
	case m.actErr != nil:
		// the core's error names the action and the command
		return m.badged(2, m.c.Width, styles.Failure, m.clean(m.actErr.Error()))
	case m.done != nil:
		return append(m.shutdownSummary(), "  "+s.Badgef(styles.Info)+" "+verb(*m.done)+" requested: the host is going down")
	}
	return nil
}

// shutdownLines is the guests' shutdown in progress.
func (m *Model) shutdownLines() []string {
	s := m.c.Styles
	if m.step == nil {
		return []string{"  " + s.Badgef(styles.Info) + " taking the VMs down first" + dots(s)}
	}
	p := m.step
	now := m.c.Now()
	text := fmt.Sprintf("taking the VMs down first: %d of %d done; those still up at %s are quit", p.Done, p.Total, p.Deadline.In(now.Location()).Format(time.TimeOnly))
	if left := p.Deadline.Sub(now); left > 0 {
		text += fmt.Sprintf(" (in %s)", left.Round(time.Second))
	}
	lines := m.badged(2, m.c.Width, styles.Info, text)
	if o := m.ended; o != nil {
		lines = append(lines, "         "+s.Muted.Render(m.clean(outcomeLine(*o))))
	}
	return lines
}

// shutdownSummary is what the guests' shutdown did, once it is over.
func (m *Model) shutdownSummary() []string {
	r := m.shutRep
	if r == nil || len(r.Outcomes) == 0 {
		return nil
	}
	var parts []string
	for _, o := range []string{host.ShutdownPoweredOff, host.ShutdownSaved, host.ShutdownQuit, host.ShutdownKilled, host.ShutdownGone, host.ShutdownFailed, host.ShutdownSkipped} {
		if n := r.Count(o); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, outcomeWords(o)))
		}
	}
	level := styles.OK
	if r.Count(host.ShutdownFailed)+r.Count(host.ShutdownSkipped) > 0 {
		level = styles.Warning
	}
	return m.badged(2, m.c.Width, level, fmt.Sprintf("VMs down in %s: %s", r.Took.D().Round(100*time.Millisecond), strings.Join(parts, ", ")))
}

func outcomeWords(o string) string {
	switch o {
	case host.ShutdownPoweredOff:
		return "powered off"
	case host.ShutdownQuit:
		return "quit"
	case host.ShutdownKilled:
		return "killed"
	case host.ShutdownSaved:
		return "saved"
	case host.ShutdownGone:
		return "already stopped"
	case host.ShutdownFailed:
		return "not stopped"
	case host.ShutdownSkipped:
		return "left alone (spec unreadable)"
	}
	return o
}

func outcomeLine(o host.ShutdownOutcome) string {
	return fmt.Sprintf("%s %s in %s", o.Name, outcomeWords(o.Outcome), o.Took.D().Round(100*time.Millisecond))
}

// dialogLines is the confirmation box.
func (m *Model) dialogLines(a Action) []string {
	s := m.c.Styles
	iw := max(m.c.Width-6, 20) // inside the border and a space each side
	title := "Reboot the host?"
	if a == hostpower.ActionPowerOff {
		title = "Power off the host? It stays off until powered on again."
	}
	inner := []string{s.Title.Render(title), ""}
	inner = append(inner, m.vmLines(0, iw)...)
	inner = append(inner, "", common.ConfirmPrompt(s, verb(a)+" now"))
	for i, l := range inner {
		if lipgloss.Width(l) > iw {
			l = ansi.Truncate(l, iw, s.Ellipsis)
		}
		inner[i] = " " + l + strings.Repeat(" ", iw-lipgloss.Width(l)) + " "
	}
	box := s.Frame.Render(strings.Join(inner, "\n"))
	var out []string
	for _, l := range strings.Split(box, "\n") {
		out = append(out, " "+l)
	}
	return out
}

// clean makes host text safe to draw, ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}
