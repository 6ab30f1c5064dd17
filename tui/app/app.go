package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

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
}

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
	ticks    int
}

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
	m.SetSize(c.Width, c.Height)
	return m
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
	cmds := []tea.Cmd{m.status.Init(), tick()}
	for _, p := range m.pages {
		cmds = append(cmds, p.Screen.Init())
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
	cmds := []tea.Cmd{tick()}
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

func isGlobalKey(k string) bool {
	if strings.HasPrefix(k, "ctrl+") {
		return true
	}
	return len(k) >= 2 && k[0] == 'f' && k[1] >= '0' && k[1] <= '9'
}

func (m *Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	k := m.c.Keys
	ks := msg.String()
	if key.Matches(msg, k.Redraw) {
		return m, tea.ClearScreen
	}
	if m.quitting {
		m.quitting = false
		if common.Confirmed(msg) {
			m.releaseLock()
			return m, tea.Quit
		}
		m.setMessage(styles.Info, "quit cancelled: the change is still on trial")
		return m, nil
	}
	capturing := m.mode == modeLogin || (m.current() != nil && m.current().Capturing())
	if key.Matches(msg, k.Quit) && (!capturing || isGlobalKey(ks)) {
		if m.opts.Kiosk {
			m.setMessage(styles.Info, "this is the host console: it does not quit (log out with F12/x)")
			return m, nil
		}
		if m.pendingTry() != nil {
			// quitting keeps nothing: the trial rolls back unless kept,
			// and the operator may be leaving in the belief it is done
			m.quitting, m.message = true, ""
			return m, nil
		}
		m.releaseLock()
		return m, tea.Quit
	}
	if m.showHelp {
		if ks == "esc" || key.Matches(msg, k.Help) {
			m.showHelp = false
		}
		return m, nil
	}
	if m.mode == modeLogin {
		return m.loginKey(msg)
	}
	s := m.current()
	if s != nil && s.Capturing() && !isGlobalKey(ks) {
		_, cmd := s.Update(msg)
		return m, cmd
	}
	switch {
	case key.Matches(msg, k.Help):
		m.showHelp = true
		return m, nil
	case key.Matches(msg, k.Login) && m.mode != modePages:
		m.openLogin()
		return m, m.form.focus()
	case key.Matches(msg, k.Lock) && m.mode == modePages:
		m.lock("by " + m.c.Session.User)
		return m, nil
	case key.Matches(msg, k.Logout) && m.mode == modePages:
		user := m.c.Session.User
		m.logout()
		m.setMessage(styles.Info, "%s logged out", user)
		return m, nil
	case key.Matches(msg, k.Refresh):
		if s != nil {
			_, cmd := s.Update(common.RefreshMsg{})
			return m, cmd
		}
		_, cmd := m.status.Update(msg)
		return m, cmd
	case key.Matches(msg, k.Status):
		if m.mode == modePages {
			m.page = -1
		}
		return m, nil
	}
	for i, p := range m.pages {
		if key.Matches(msg, p.Key) {
			if m.mode != modePages {
				m.setMessage(styles.Info, "log in first (F2/l) to open %s", p.Screen.Title())
				return m, nil
			}
			m.message = ""
			m.page = i
			_, cmd := p.Screen.Update(common.ActivateMsg{})
			return m, cmd
		}
	}
	if s != nil {
		_, cmd := s.Update(msg)
		return m, cmd
	}
	return m, nil
}

// pendingTry is the network change on trial that the status screen or a
// page knows of, nil when none does.
func (m *Model) pendingTry() *netcfg.Pending {
	if p := m.status.PendingTry(); p != nil {
		return p
	}
	for _, pg := range m.pages {
		if w, ok := pg.Screen.(TrialWatcher); ok {
			if p := w.PendingTry(); p != nil {
				return p
			}
		}
	}
	return nil
}

// quitLines is the dialog that asks before quitting during a trial.
func (m *Model) quitLines() []string {
	s := m.c.Styles
	p := m.pendingTry()
	what := "A network change on trial is rolling back now."
	switch {
	case p == nil:
		// it ended since the key was pressed
		what = "The network change on trial has ended."
	case p.RollbackError != "":
		what = "A network change on trial failed to roll back (virt net rollback)."
	case p.Remaining(m.c.Now()) > 0:
		left := p.Remaining(m.c.Now()).Round(time.Second)
		what = fmt.Sprintf("A network change is on trial and rolls back in %d:%02d unless kept.", int(left.Minutes()), int(left.Seconds())%60)
	}
	return []string{
		s.Badgef(styles.Warning) + " " + s.Title.Render(what),
		"",
		"Quitting does not keep it: keep it on the Network screen (F6/n) or with",
		"virt net confirm, or let it roll back by itself.",
		"",
		s.Section.Render("Quit anyway? y/N"),
		common.ConfirmPrompt(s, "quit anyway"),
	}
}

func (m *Model) openLogin() {
	prev := m.lockedBy
	m.form = newLoginForm(m.c.Styles, prev)
	m.form.setWidth(m.contentSizeW())
	m.mode = modeLogin
	m.message = ""
}

func (m *Model) contentSizeW() int { w, _ := m.contentSize(); return w }

func (m *Model) loginKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	f := m.form
	switch msg.String() {
	case "esc":
		m.cancelLogin()
		m.form = nil
		if m.lockedBy != "" {
			m.mode = modeLocked
		} else {
			m.mode = modeStatus
		}
		return m, nil
	case "enter":
		if m.busy {
			return m, nil
		}
		if f.focused == 0 && f.user.Value() != "" && f.pass.Value() == "" {
			return m, f.next()
		}
		user, pass := strings.TrimSpace(f.user.Value()), f.pass.Value()
		if user == "" {
			f.err = "enter a user name"
			return m, f.focusIndex(0)
		}
		f.pass.SetValue("") // the form never keeps the password
		f.err, f.hint = "", ""
		m.busy = true
		return m, m.login(user, pass)
	case "tab", "down", "shift+tab", "up":
		return m, f.next()
	}
	return m, f.update(msg)
}

func (m *Model) login(user, pass string) tea.Cmd {
	a, tty := m.auth, m.opts.TTY
	m.loginSeq++
	seq := m.loginSeq
	ctx, cancel := context.WithTimeout(m.c.Ctx, 60*time.Second)
	m.loginCancel = cancel
	return func() tea.Msg {
		defer cancel()
		if a == nil {
			return loginResultMsg{seq: seq, err: errors.New("login is not available on this build")}
		}
		u, err := a.Login(ctx, user, pass, tty)
		return loginResultMsg{seq: seq, user: u, err: err}
	}
}

// cancelLogin abandons the login in flight: its result will be dropped.
func (m *Model) cancelLogin() {
	if m.loginCancel != nil {
		m.loginCancel()
		m.loginCancel = nil
	}
	m.loginSeq++
	m.busy = false
}

func (m *Model) onLogin(msg loginResultMsg) tea.Cmd {
	if msg.seq != m.loginSeq || m.mode != modeLogin {
		// cancelled (esc) or superseded: the operator walked away from it
		if m.c.Logger != nil && msg.err == nil {
			m.c.Logger.Info("login result dropped: cancelled on the form", "user", msg.user, "tty", m.opts.TTY)
		}
		return nil
	}
	m.busy = false
	m.loginCancel = nil
	if msg.err != nil {
		if m.form != nil {
			m.form.err, m.form.hint = Describe(msg.err, m.opts.AdminGroup)
			return m.form.focusIndex(1) // the user name stays; retype the password
		}
		return nil
	}
	m.form = nil
	m.lockedBy = ""
	m.mode = modePages
	m.page = -1
	m.c.Session.User = msg.user
	m.c.Session.Writer = false
	m.c.Session.Holder = ""
	if m.idle != nil {
		m.idle.Touch()
	}
	m.setMessage(styles.OK, "logged in as %s", msg.user)
	return m.acquire(false)
}

func (m *Model) acquire(retry bool) tea.Cmd {
	lk, user, tty := m.locker, m.c.Session.User, m.opts.TTY
	if lk == nil {
		m.c.Session.Writer = true
		return nil
	}
	if m.acquiring || m.release != nil {
		return nil // one acquisition at a time, and never of a lock we hold
	}
	m.acquiring = true
	return func() tea.Msg {
		rel, holder, err := lk(user, tty)
		return lockResultMsg{release: rel, holder: holder, err: err, retry: retry}
	}
}

func (m *Model) onLock(msg lockResultMsg) tea.Cmd {
	m.acquiring = false
	if m.mode != modePages || m.release != nil {
		// logged out meanwhile, or already held: give it back at once
		if msg.release != nil {
			msg.release()
		}
		return nil
	}
	switch {
	case msg.err != nil:
		m.c.Session.Writer = false
		m.c.Session.Holder = ""
		if m.announceReadOnly("error: " + msg.err.Error()) {
			m.setMessage(styles.Failure, "console lock: %v (read-only)", msg.err)
		}
	case msg.release != nil:
		m.release = msg.release
		m.c.Session.Writer, m.c.Session.Holder = true, ""
		m.readOnly = ""
		if msg.retry {
			m.setMessage(styles.OK, "this console now holds the console lock")
		}
	default:
		m.c.Session.Writer, m.c.Session.Holder = false, msg.holder
		if m.announceReadOnly("holder: " + msg.holder) {
			m.setMessage(styles.Warning, "%s", m.c.Session.ReadOnlyReason())
		}
	}
	return nil
}

// announceReadOnly reports whether the read-only state state is news: the
// warning shows once when this console becomes read-only or the reason
// changes, not again on every retry of the lock. The header's [RO] stays.
func (m *Model) announceReadOnly(state string) bool {
	if state == m.readOnly {
		return false
	}
	m.readOnly = state
	return true
}

func (m *Model) releaseLock() {
	if m.release != nil {
		if err := m.release(); err != nil && m.c.Logger != nil {
			m.c.Logger.Warn("console lock release", "err", err)
		}
		m.release = nil
	}
	m.c.Session.Writer = false
	m.c.Session.Holder = ""
}

func (m *Model) logout() {
	m.releaseLock()
	if m.c.Logger != nil && m.c.Session.User != "" {
		m.c.Logger.Info("logout", "user", m.c.Session.User, "tty", m.opts.TTY)
	}
	m.c.Session.User = ""
	m.mode = modeStatus
	m.page = -1
	m.form = nil
	m.lockedBy = ""
	m.readOnly = ""
}

func (m *Model) lock(why string) {
	user := m.c.Session.User
	m.logout()
	m.lockedBy = user
	m.mode = modeLocked
	m.setMessage(styles.Warning, "Console locked (%s): F2/l to log in again", why)
	if m.c.Logger != nil {
		m.c.Logger.Info("console locked", "user", user, "tty", m.opts.TTY, "why", why)
	}
}

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
		mode := "[RW]"
		if !se.Writer {
			mode = "[RO]"
		}
		who = se.User + "@" + orDash(m.opts.TTY) + " " + mode
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
	return ""
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

func (m *Model) helpLines() []string {
	s := m.c.Styles
	k := m.c.Keys
	global := []key.Binding{k.Help, k.Login, k.Status}
	for _, p := range m.pages {
		global = append(global, p.Key)
	}
	global = append(global, k.Refresh, k.Logout)
	if !m.opts.Kiosk {
		global = append(global, k.Quit)
	}
	global = append(global, k.Redraw)
	cur := m.current()
	if cur == nil {
		lines := append([]string{s.Title.Render("Keys")}, twoColumns(global)...)
		return append(lines, "",
			"Every function key has a letter: use the letter when F-keys do not",
			"arrive (serial line, IPMI SOL, browser consoles). Letters act as keys",
			"only while no text field is focused; F-keys always do.")
	}
	// on a page its own keys come first; the global ones follow as far
	// as they fit (the tab line and the legend show them anyway)
	var own []key.Binding
	for _, col := range cur.FullHelp() {
		own = append(own, col...)
	}
	lines := append([]string{s.Title.Render(cur.Title() + " keys")}, twoColumns(own)...)
	lines = append(lines, "", s.Section.Render("Global keys")+" "+s.Muted.Render("(letters work when F-keys do not arrive)"))
	return append(lines, twoColumns(global)...)
}

// twoColumns lays bindings out in two columns, the key column as wide as
// the widest key.
func twoColumns(bs []key.Binding) []string {
	kw := 0
	for _, b := range bs {
		kw = max(kw, lipgloss.Width(b.Help().Key))
	}
	half := (len(bs) + 1) / 2
	var lines []string
	for i := 0; i < half; i++ {
		l := fmt.Sprintf("  %-*s %-24s", kw, bs[i].Help().Key, helpDesc(bs[i]))
		if j := i + half; j < len(bs) {
			l += fmt.Sprintf(" %-*s %s", kw, bs[j].Help().Key, helpDesc(bs[j]))
		}
		lines = append(lines, strings.TrimRight(l, " "))
	}
	return lines
}

func helpDesc(b key.Binding) string {
	d := b.Help().Desc
	if d == "log in" {
		return "log in; lock"
	}
	return d
}

// FixSize keeps the current size whatever the terminal reports (--size).
func (m *Model) FixSize() { m.opts.FixedSize = true }

// Close gives the console lock back (the program is ending).
func (m *Model) Close() { m.releaseLock() }
