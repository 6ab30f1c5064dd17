package app

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
)

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
		m.lastPaint = m.c.Now()
		return m, tea.ClearScreen
	}
	if m.quitting {
		m.quitting = false
		if common.Confirmed(msg) {
			m.releaseLock()
			return m, tea.Quit
		}
		m.loggedOut = false
		m.setMessage(styles.Info, "quit cancelled: the change is still on trial")
		return m, nil
	}
	capturing := m.mode == modeLogin || (m.current() != nil && m.current().Capturing())
	if key.Matches(msg, k.Quit) && (!capturing || isGlobalKey(ks)) {
		return m.quit()
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
	case (key.Matches(msg, k.Lock) || key.Matches(msg, k.Logout)) && m.mode == modePages && m.opts.LoggedIn != "":
		// a web session has no login form behind it: its server ran PAM
		// and ends the whole login when the program ends logged out
		m.loggedOut = true
		return m.quit()
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

// quit ends the program, unless this is the host console; while a
// network change is on trial it asks first.
func (m *Model) quit() (tea.Model, tea.Cmd) {
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
