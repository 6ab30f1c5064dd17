package app

import (
	"context"
	"errors"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/styles"
)

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
	m.lockKnown = false
	if m.idle != nil {
		m.idle.Touch()
	}
	m.setMessage(styles.OK, "logged in as %s", msg.user)
	return m.acquire(false)
}

func (m *Model) acquire(retry bool) tea.Cmd {
	lk, user, tty := m.locker, m.c.Session.User, m.opts.TTY
	if lk == nil {
		m.c.Session.Writer, m.lockKnown = true, true
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
	m.lockKnown = true
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
