package app

import (
	"context"
	"fmt"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Authenticator logs a user in (auth.Authenticator in production). The
// error is shown to the operator through Messages.
type Authenticator interface {
	Login(ctx context.Context, user, password, tty string) (string, error)
}

// LoginFunc adapts a function to Authenticator.
type LoginFunc func(ctx context.Context, user, password, tty string) (string, error)

// Login calls f.
func (f LoginFunc) Login(ctx context.Context, user, password, tty string) (string, error) {
	return f(ctx, user, password, tty)
}

// Locker takes the host's single-writer console lock for user on tty. It
// returns a release function when this console got it, or holder (who
// has it, "alice on tty1 since 09:12") when another console does.
type Locker func(user, tty string) (release func() error, holder string, err error)

// Idle is the idle auto-lock timer (auth.IdleTimer in production).
type Idle interface {
	Touch()
	Expired() bool
}

// Page is a screen reachable after login, with the key that opens it.
type Page struct {
	Key    key.Binding
	Tab    string // short name on the tab line
	Screen common.Screen
}

// Options configure the app.
type Options struct {
	Product, Version string
	// TTY is this console's terminal, for the audit log and the lock.
	TTY string
	// Kiosk: this is the host console (tty1, serial getty); the program
	// does not quit on q or ctrl+c (there is nothing behind it to return
	// to), only on SIGTERM/SIGHUP.
	Kiosk bool
	// FixedSize keeps the size set with SetSize (the --size override).
	FixedSize bool
	// AdminGroup is named on the login screen.
	AdminGroup string
	// IdleTimeout is shown in messages; Idle does the timing.
	IdleTimeout time.Duration
	// Hostname is shown on the header until the status screen knows it.
	Hostname string
	// LoggedIn starts the session logged in as this user, without the
	// login form: a web terminal session, whose server ran PAM. It takes
	// the console lock like a login; logging out or locking ends the
	// program (and so the web session).
	LoggedIn string
	// Repaint, when positive, repaints the whole screen this often while
	// no key comes, and before the first key after a pause: the renderer
	// otherwise redraws only what it changed, so whatever wrote over the
	// screen (the kernel printing on a serial console) or a terminal that
	// attached mid-session (a serial concentrator, virt vm console) would
	// keep a broken frame until ctrl+l. The repaint goes through the
	// program's renderer, so the tier's redraw cap still holds. dcui sets
	// it on the plain tier (DefaultRepaint); 0: only ctrl+l repaints.
	Repaint time.Duration
	// KernelConsole: the kernel prints its messages on this terminal (it
	// is one of the consoles in /sys/class/tty/console/active); the empty
	// message line says so, and where to read them.
	KernelConsole bool
}

// DefaultRepaint is the plain (serial) tier's repaint period: a whole
// 80x24 frame is about 2 KB, 2 s of a 9600-baud line, so every 15 s
// costs little and bounds how long a torn screen lasts.
const DefaultRepaint = 15 * time.Second

// repaintIdleGap is the longest pause after which a key repaints the
// screen before its answer is drawn: the operator who just arrived at a
// torn (or freshly attached) console gets a whole frame at their first
// key.
const repaintIdleGap = 5 * time.Second

// Status is the status screen: shown before login, and as the first page
// after it.
type Status interface {
	common.Component
	// Content renders the status screen's body for w x h cells (no frame,
	// no legend).
	Content(w, h int) string
	// Hostname is the host's name once loaded ("" before).
	Hostname() string
	// PendingTry is the network change on trial as last read, nil when
	// none: quitting asks first while one is.
	PendingTry() *netcfg.Pending
}

// TrialWatcher is a page that knows about a network change on trial too
// (the Network screen, which learns of its own at once).
type TrialWatcher interface {
	PendingTry() *netcfg.Pending
}

type (
	loginResultMsg struct {
		seq  int
		user string
		err  error
	}
	lockResultMsg struct {
		release func() error
		holder  string
		err     error
		retry   bool
	}
	appTickMsg struct{}
)

type mode int

const (
	modeStatus mode = iota // nobody logged in, status screen
	modeLogin              // the login form
	modeLocked             // idle-locked or locked by the operator
	modePages              // logged in
)

// Model is the DCUI root model.
type Model struct {
	c      common.Common
	opts   Options
	status Status
	pages  []Page
	auth   Authenticator
	locker Locker
	idle   Idle

	mode     mode
	page     int // index in pages; -1 for the status page
	showHelp bool
	form     *loginForm
	busy     bool // a login is in flight
	loginSeq int  // numbers logins; a result for an older one is dropped
	// loginCancel cancels the login in flight (esc on the form)
	loginCancel context.CancelFunc
	acquiring   bool // a console lock acquisition is in flight
	release     func() error
	lockedBy    string // user shown on the lock screen
	message     string // one-line message (errors, read-only notices)
	msgLevel    styles.Level
	// readOnly is the read-only state last announced on the message line
	// ("" while this console writes): the lock is retried every few
	// seconds, and only a change (another holder, another error) is news.
	readOnly string
	// quitting: the quit key was pressed while a network change is on
	// trial; the dialog asks first (y quits, any other key cancels)
	quitting bool
	// loggedOut: a web session (Options.LoggedIn) ends because its user
	// logged out or locked, not only quit
	loggedOut bool
	ticks     int
	// lockKnown: the writer lock's state is known (a result came, or
	// there is no lock); until then the header shows no [RO]/[RW]
	lockKnown bool
	// lastPaint is when the whole screen was last repainted (the first
	// frame, a timed repaint, ctrl+l); lastInput when the last key came
	lastPaint, lastInput time.Time
}

// LoggedOut says whether the program ended because the user of a web
// session (Options.LoggedIn) logged out or locked: its web terminal then
// ends the whole login, not only this session.
func (m *Model) LoggedOut() bool { return m.loggedOut }

// New returns the app. pages are the screens after login, in tab order.
func New(c common.Common, status Status, pages []Page, a Authenticator, lk Locker, idle Idle, opts Options) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Session == nil {
		c.Session = &common.Session{}
	}
	c.Session.TTY = opts.TTY
	if opts.AdminGroup == "" {
		opts.AdminGroup = "virtcon-admin"
	}
	m := &Model{c: c, opts: opts, status: status, pages: pages, auth: a, locker: lk, idle: idle, page: -1}
	if opts.LoggedIn != "" {
		m.mode, c.Session.User = modePages, opts.LoggedIn
	}
	m.SetSize(c.Width, c.Height)
	return m
}

// repaintGap is how long without a key makes the next key repaint first.
func (m *Model) repaintGap() time.Duration { return min(m.opts.Repaint, repaintIdleGap) }

// inputRepaint notes a key (or paste) and repaints the whole screen
// before its answer when it is the first after a pause.
func (m *Model) inputRepaint() tea.Cmd {
	now := m.c.Now()
	last := m.lastInput
	m.lastInput = now
	if m.opts.Repaint <= 0 || (!last.IsZero() && now.Sub(last) < m.repaintGap()) {
		return nil
	}
	m.lastPaint = now
	return tea.ClearScreen
}

// timerRepaint repaints the whole screen once Repaint has passed since
// the last whole frame, unless keys are coming (their answers are drawn;
// the first key after the pause repainted anyway).
func (m *Model) timerRepaint() tea.Cmd {
	if m.opts.Repaint <= 0 {
		return nil
	}
	now := m.c.Now()
	if m.lastPaint.IsZero() {
		m.lastPaint = now
		return nil
	}
	if now.Sub(m.lastPaint) < m.opts.Repaint || (!m.lastInput.IsZero() && now.Sub(m.lastInput) < time.Second) {
		return nil
	}
	m.lastPaint = now
	return tea.ClearScreen
}

// Session is the console's login session.
func (m *Model) Session() *common.Session { return m.c.Session }

// SetSize lays the app out for w x h; 0x0 (a serial tty) means 80x24.
func (m *Model) SetSize(w, h int) {
	m.c.Width, m.c.Height = term.Size(w, h)
	cw, ch := m.contentSize()
	m.status.SetSize(m.c.Width, m.c.Height)
	for _, p := range m.pages {
		p.Screen.SetSize(cw, ch)
	}
	if m.form != nil {
		m.form.setWidth(cw)
	}
}

// Frame rows: border, header, tabs, content..., message, CLI, screen
// keys, global keys, border.
const chromeRows = 8

func (m *Model) contentSize() (int, int) {
	return max(m.c.Width-4, 1), max(m.c.Height-chromeRows, 1)
}

// Init starts the status screen, every page and the clock.
func (m *Model) Init() tea.Cmd {
	// the program's first frame is drawn whole (it enters the alternate
	// screen, which erases it)
	m.lastPaint = m.c.Now()
	cmds := []tea.Cmd{m.status.Init(), tick()}
	for _, p := range m.pages {
		cmds = append(cmds, p.Screen.Init())
	}
	if m.opts.LoggedIn != "" {
		cmds = append(cmds, m.acquire(false))
	}
	return tea.Batch(cmds...)
}

func tick() tea.Cmd { return tea.Tick(time.Second, func(time.Time) tea.Msg { return appTickMsg{} }) }

func (m *Model) current() common.Screen {
	if m.mode != modePages || m.page < 0 || m.page >= len(m.pages) {
		return nil
	}
	return m.pages[m.page].Screen
}

func (m *Model) setMessage(l styles.Level, format string, args ...any) {
	m.msgLevel, m.message = l, fmt.Sprintf(format, args...)
}

// Update routes messages. It never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var repaint tea.Cmd
	switch msg.(type) {
	case tea.KeyPressMsg, tea.PasteMsg:
		repaint = m.inputRepaint()
	}
	next, cmd := m.update(msg)
	if repaint == nil {
		return next, cmd
	}
	return next, tea.Batch(repaint, cmd)
}

func (m *Model) update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		if !m.opts.FixedSize {
			m.SetSize(msg.Width, msg.Height)
		}
		return m, nil
	case tea.KeyPressMsg:
		if m.idle != nil {
			// a key after the timeout (before the next tick noticed it)
			// finds the console locked; it does not count as activity
			if m.mode == modePages && m.idle.Expired() {
				m.lock(fmt.Sprintf("after %s without input", fmtDuration(m.opts.IdleTimeout)))
				return m, nil
			}
			m.idle.Touch()
		}
		return m.key(msg)
	case tea.PasteMsg:
		if m.idle != nil {
			if m.mode == modePages && m.idle.Expired() {
				m.lock(fmt.Sprintf("after %s without input", fmtDuration(m.opts.IdleTimeout)))
				return m, nil
			}
			m.idle.Touch()
		}
		if m.mode == modeLogin && m.form != nil {
			return m, m.form.update(msg)
		}
		if s := m.current(); s != nil {
			_, cmd := s.Update(msg)
			return m, cmd
		}
		return m, nil
	case appTickMsg:
		return m, m.onTick()
	case common.ActivityMsg:
		if m.idle != nil && m.mode == modePages {
			m.idle.Touch()
		}
		return m, nil
	case common.LockMsg:
		if m.mode == modePages {
			m.lock(msg.Why)
		}
		return m, nil
	case loginResultMsg:
		return m, m.onLogin(msg)
	case lockResultMsg:
		return m, m.onLock(msg)
	}
	// everything else (load results, timers) goes to every screen
	return m, m.broadcast(msg)
}

func (m *Model) broadcast(msg tea.Msg) tea.Cmd {
	cmds := []tea.Cmd{}
	if _, cmd := m.status.Update(msg); cmd != nil {
		cmds = append(cmds, cmd)
	}
	for _, p := range m.pages {
		if _, cmd := p.Screen.Update(msg); cmd != nil {
			cmds = append(cmds, cmd)
		}
	}
	return tea.Batch(cmds...)
}

func (m *Model) onTick() tea.Cmd {
	m.ticks++
	cmds := []tea.Cmd{tick(), m.timerRepaint()}
	if m.mode == modePages && m.idle != nil && m.idle.Expired() {
		m.lock(fmt.Sprintf("after %s without input", fmtDuration(m.opts.IdleTimeout)))
		return tea.Batch(cmds...)
	}
	if s := m.current(); s != nil {
		if _, cmd := s.Update(common.TickMsg{Now: m.c.Now()}); cmd != nil {
			cmds = append(cmds, cmd)
		}
	}
	// a read-only console takes the writer lock over once it is free
	if m.mode == modePages && !m.c.Session.Writer && m.locker != nil && m.ticks%5 == 0 {
		cmds = append(cmds, m.acquire(true))
	}
	return tea.Batch(cmds...)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "a while"
	case d%time.Minute == 0:
		n := int(d / time.Minute)
		if n == 1 {
			return "1 minute"
		}
		return fmt.Sprintf("%d minutes", n)
	}
	return d.String()
}

// FixSize keeps the current size whatever the terminal reports (--size).
func (m *Model) FixSize() { m.opts.FixedSize = true }

// Close gives the console lock back (the program is ending).
func (m *Model) Close() { m.releaseLock() }
