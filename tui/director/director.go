package director

import (
	"context"
	"errors"
	"time"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Agent states (Status.State), as the node agent records them.
const (
	StateConnecting = agent.StateConnecting
	StateConnected  = agent.StateConnected
	StateBackoff    = agent.StateBackoff
	StateRevoked    = agent.StateRevoked
	StateExpired    = agent.StateExpired
	StateStopped    = agent.StateStopped
)

// Alert kinds (Status.Alert).
const (
	AlertRevoked = agent.AlertRevoked
	AlertExpired = agent.AlertExpired
)

// Status is the node agent's status (agent.ReadStatus): the enrolment
// from its files, the session from the running agent's record, the alert
// of a dead credential.
type Status = agent.Status

// inGoodStanding reports an enrolment that a new one would replace for
// nothing: enrolled, and neither revoked nor expired.
func inGoodStanding(s *Status, now time.Time) bool {
	if s == nil || !s.Enrolled || s.Alert != "" || s.State == StateRevoked || s.State == StateExpired {
		return false
	}
	return s.CertNotAfter.IsZero() || now.Before(s.CertNotAfter)
}

// Sources are the screen's dependencies; each is called from a tea.Cmd.
type Sources struct {
	// Status reads the node agent's status (agent.ReadStatus): files
	// only, nothing on the network.
	Status func() (*Status, error)
	// Enroll enrols this host with join's director (agent.Enroll),
	// within ctx. nil: the console cannot enrol.
	Enroll func(ctx context.Context, join enroll.Join) (*Status, error)
}

const (
	loadTimeout   = 10 * time.Second
	enrollTimeout = 2 * time.Minute
	// reloadEvery keeps the status fresh while the screen is shown, in
	// ticks of a second (the agent's heartbeat is every 10 s).
	reloadEvery = 5
	// maxJoin bounds the field: a join string with the longest DNS name
	// is about 380 characters.
	maxJoin = 512
	// pinShown is how many hex digits of the pin the confirmation shows
	// to compare.
	pinShown = 16
)

// StartCommand is how the admin starts the agent once enrolled; AltStart
// runs it in the foreground where systemd does not.
const (
	StartCommand = "systemctl enable --now virtcon-agent"
	AltStart     = "virt agent run"
)

type (
	statusMsg struct {
		st  *Status
		err error
	}
	enrollMsg struct {
		addr string
		st   *Status
		err  error
	}
)

// step is where the enrolment is.
type step int

const (
	stepNone      step = iota
	stepPaste          // the masked field is focused
	stepConfirm        // the join string parsed: y enrols
	stepEnrolling      // agent.Enroll runs
)

// KeyMap is the screen's keys; none is a letter the global map reserves.
type KeyMap struct {
	Enrol, Submit, Clear, Cancel key.Binding
}

var _ keys.Map = KeyMap{}

// DefaultKeyMap returns the screen's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Enrol:  keys.On("e", "enter").Help("e/enter", "enrol"),
		Submit: keys.On("enter").Help("enter", "check join string"),
		Clear:  keys.On("ctrl+u").Help("^U", "clear"),
		Cancel: keys.On("esc").Help("esc", "cancel"),
	}
}

// ShortHelp is the legend of the status view.
func (k KeyMap) ShortHelp() []key.Binding { return []key.Binding{k.Enrol} }

// FullHelp is the screen's help: the view, the field, the confirmation.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Enrol, k.Submit, k.Clear, k.Cancel}, common.ConfirmHelp("enrol")}
}

// Model is the Director screen.
type Model struct {
	c    common.Common
	src  Sources
	keys KeyMap

	st       *Status
	stErr    error
	loaded   bool
	busy     bool
	ticks    int
	lastLoad time.Time

	step  step
	field textinput.Model
	// join is the parsed join string awaiting y; the zero Join when
	// none. It holds the secret until the enrolment starts.
	join     enroll.Join
	parseErr error
	// enrolling: the director being enrolled with, since when
	enrollAddr  string
	enrollSince time.Time
	// the last enrolment's outcome: done (its status), or err
	done    *Status
	doneErr error

	note      string
	noteLevel styles.Level
}

var _ common.Screen = (*Model)(nil)

// New returns the Director screen.
func New(c common.Common, src Sources) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	m := &Model{c: c, src: src, keys: DefaultKeyMap(), field: textinput.New()}
	m.field.Prompt = ""
	m.field.CharLimit = maxJoin
	m.field.EchoMode = textinput.EchoPassword
	m.field.EchoCharacter = '*'
	if c.Tier == term.Rich {
		m.field.EchoCharacter = '•'
	}
	if c.Styles != nil {
		m.field.SetStyles(c.Styles.TextInput())
	}
	m.SetSize(76, 16)
	return m
}

// Title names the screen.
func (m *Model) Title() string { return "Director" }

// CLI is the command that does what the screen shows.
func (m *Model) CLI() string {
	switch {
	case m.step == stepPaste || m.step == stepConfirm || m.step == stepEnrolling:
		return "virt agent enroll --join-file FILE"
	case m.done != nil && !m.done.Running:
		return StartCommand
	}
	return "virt agent status"
}

// Capturing is true while the field or the confirmation is open: every
// key is theirs (the join string's letters must reach the field).
func (m *Model) Capturing() bool { return m.step == stepPaste || m.step == stepConfirm }

// ShortHelp is the screen's part of the legend.
func (m *Model) ShortHelp() []key.Binding {
	switch m.step {
	case stepPaste:
		return []key.Binding{m.keys.Submit, m.keys.Clear, m.keys.Cancel}
	case stepConfirm:
		return common.ConfirmHelp("enrol")
	case stepEnrolling:
		return nil
	}
	if inGoodStanding(m.st, m.c.Now()) {
		return nil
	}
	return m.keys.ShortHelp()
}

// FullHelp is the screen's help.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// SetSize sets the content area.
func (m *Model) SetSize(w, h int) {
	m.c.Width, m.c.Height = max(w, 30), max(h, 6)
	// "  Join string  [" ... "]  512 characters"
	m.field.SetWidth(max(m.c.Width-38, 8))
}

// Init does nothing: the app activates the screen when it is shown.
func (m *Model) Init() tea.Cmd { return nil }

func (m *Model) load() tea.Cmd {
	if m.busy || m.src.Status == nil {
		return nil
	}
	m.busy = true
	f := m.src.Status
	return func() tea.Msg {
		st, err := f()
		return statusMsg{st, err}
	}
}

// Update handles keys and results; it never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case common.ActivateMsg, common.RefreshMsg:
		return m, m.load()
	case common.TickMsg:
		m.ticks++
		if m.ticks%reloadEvery == 0 {
			return m, m.load()
		}
	case statusMsg:
		m.busy, m.loaded = false, true
		if msg.err != nil && m.c.Logger != nil && (m.stErr == nil || m.stErr.Error() != msg.err.Error()) {
			m.c.Logger.Warn("director: agent status", "err", msg.err)
		}
		m.st, m.stErr = msg.st, msg.err
		m.lastLoad = m.c.Now()
	case enrollMsg:
		m.step = stepNone
		m.done, m.doneErr = nil, nil
		if msg.err != nil {
			m.doneErr = msg.err
			if m.c.Logger != nil {
				m.c.Logger.Error("director: enrolment failed", "director", msg.addr, "user", m.c.Session.User, "err", msg.err)
			}
		} else {
			m.done = msg.st
			if m.done == nil {
				m.done = &Status{Enrolled: true, Director: msg.addr}
			}
			if m.c.Logger != nil {
				m.c.Logger.Info("director: enrolled", "director", msg.addr, "node", m.done.NodeID, "user", m.c.Session.User)
			}
		}
		return m, m.load()
	case tea.PasteMsg:
		if m.step == stepPaste {
			var cmd tea.Cmd
			m.field, cmd = m.field.Update(msg)
			m.parseErr = nil
			return m, cmd
		}
	case tea.KeyPressMsg:
		switch m.step {
		case stepPaste:
			return m, m.pasteKey(msg)
		case stepConfirm:
			return m, m.confirmKey(msg)
		case stepEnrolling:
			return m, nil
		}
		if key.Matches(msg, m.keys.Enrol) {
			return m, m.open()
		}
	}
	return m, nil
}

// open shows the paste field, or says why not.
func (m *Model) open() tea.Cmd {
	m.note = ""
	now := m.c.Now()
	switch {
	case !m.c.Session.CanWrite():
		m.note, m.noteLevel = "enrol refused: "+m.c.Session.ReadOnlyReason(), styles.Warning
		return nil
	case m.src.Enroll == nil:
		m.note, m.noteLevel = "enrolment is not available on this console: use virt agent enroll", styles.Failure
		return nil
	case !m.loaded:
		m.note, m.noteLevel = "the agent's status is still loading: try again in a moment", styles.Info
		return nil
	case m.stErr != nil:
		// unreadable credentials may be good ones: never enrol over them
		m.note, m.noteLevel = "enrol refused: the agent's status could not be read (see above)", styles.Failure
		return nil
	case inGoodStanding(m.st, now):
		m.note, m.noteLevel = "already enrolled with "+m.clean(m.st.Director)+": to enrol elsewhere, run virt agent leave first", styles.Info
		return nil
	}
	m.step, m.parseErr, m.done, m.doneErr = stepPaste, nil, nil, nil
	m.field.Reset()
	return m.field.Focus()
}

// close leaves the enrolment and forgets the join string.
func (m *Model) close(note string) {
	m.step = stepNone
	m.field.Reset()
	m.field.Blur()
	m.join, m.parseErr = enroll.Join{}, nil
	m.note, m.noteLevel = note, styles.Info
}

func (m *Model) pasteKey(msg tea.KeyPressMsg) tea.Cmd {
	switch {
	case key.Matches(msg, m.keys.Cancel):
		m.close("enrolment cancelled")
		return nil
	case key.Matches(msg, m.keys.Submit):
		return m.submit()
	case key.Matches(msg, m.keys.Clear):
		m.field.Reset()
		m.parseErr = nil
		return nil
	}
	var cmd tea.Cmd
	m.field, cmd = m.field.Update(msg)
	m.parseErr = nil
	return cmd
}

// errNoPin refuses a join string without a CA pin: the console has no
// way to skip the pin (the CLI's --unsafe-skip-ca-pin is the only one).
var errNoPin = errors.New("join string: pin: missing: the console enrols only with the director's CA pin (#sha256:<hex>); ask for a join string with it, or use virt agent enroll --unsafe-skip-ca-pin")

// submit checks the field's join string: its error under the field, or
// the confirmation.
func (m *Model) submit() tea.Cmd {
	if m.field.Value() == "" {
		m.parseErr = errors.New("join string: empty: paste the string the director's admin got from virt-director token create")
		return nil
	}
	j, err := enroll.ParseJoin(m.field.Value())
	if err != nil {
		// its message never contains the secret
		m.parseErr = err
		return nil
	}
	if j.Pin() == "" {
		m.parseErr = errNoPin
		return nil
	}
	m.join, m.parseErr = j, nil
	// the field has done its part: the secret is in join alone now
	m.field.Reset()
	m.field.Blur()
	m.step = stepConfirm
	return nil
}

// confirmKey answers the confirmation as every DCUI confirmation does: y
// goes ahead, any other key cancels.
func (m *Model) confirmKey(msg tea.KeyPressMsg) tea.Cmd {
	if !common.Confirmed(msg) {
		m.close("enrolment cancelled")
		return nil
	}
	if !m.c.Session.CanWrite() {
		// the lock may have moved while the dialog was open
		m.close("")
		m.note, m.noteLevel = "enrol refused: "+m.c.Session.ReadOnlyReason(), styles.Warning
		return nil
	}
	j, f, parent := m.join, m.src.Enroll, m.c.Ctx
	m.join = enroll.Join{}
	m.step, m.enrollAddr, m.enrollSince, m.note = stepEnrolling, j.Addr(), m.c.Now(), ""
	if m.c.Logger != nil {
		m.c.Logger.Info("director: enrolling", "director", j.Addr(), "token_id", j.ID(), "user", m.c.Session.User, "tty", m.c.Session.TTY)
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, enrollTimeout)
		defer cancel()
		st, err := f(ctx, j)
		return enrollMsg{addr: j.Addr(), st: st, err: err}
	}
}

// clean makes host text safe to draw, ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }
