package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

var fixedNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// fakeStatus stands in for the status screen.
type fakeStatus struct {
	w, h    int
	pending *netcfg.Pending
}

func (f *fakeStatus) Init() tea.Cmd                       { return nil }
func (f *fakeStatus) Update(tea.Msg) (tea.Model, tea.Cmd) { return f, nil }
func (f *fakeStatus) View() tea.View                      { return tea.NewView("") }
func (f *fakeStatus) SetSize(w, h int)                    { f.w, f.h = w, h }
func (f *fakeStatus) ShortHelp() []key.Binding            { return nil }
func (f *fakeStatus) FullHelp() [][]key.Binding           { return nil }
func (f *fakeStatus) Hostname() string                    { return "esx-lab-01" }
func (f *fakeStatus) PendingTry() *netcfg.Pending         { return f.pending }
func (f *fakeStatus) Content(w, h int) string {
	return common.Fit([]string{"MANAGEMENT", "  eno1     192.168.10.5/24   https://192.168.10.5:8443/"}, w, h, "~")
}

// fakeScreen records what it receives.
type fakeScreen struct {
	title     string
	capturing bool
	keys      []string
	activated int
	ticks     int
	w, h      int
}

func (f *fakeScreen) Init() tea.Cmd { return nil }
func (f *fakeScreen) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		f.keys = append(f.keys, msg.String())
	case common.ActivateMsg:
		f.activated++
	case common.TickMsg:
		f.ticks++
	}
	return f, nil
}
func (f *fakeScreen) View() tea.View {
	return tea.NewView(f.title + " content\nsecond line")
}
func (f *fakeScreen) SetSize(w, h int) { f.w, f.h = w, h }
func (f *fakeScreen) ShortHelp() []key.Binding {
	return []key.Binding{key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "start"))}
}
func (f *fakeScreen) FullHelp() [][]key.Binding { return [][]key.Binding{f.ShortHelp()} }
func (f *fakeScreen) Title() string             { return f.title }
func (f *fakeScreen) CLI() string               { return "virt vm list" }
func (f *fakeScreen) Capturing() bool           { return f.capturing }

type fakeIdle struct{ expired bool }

// Touch starts a new period, like auth.IdleTimer: it does not latch.
func (f *fakeIdle) Touch()        { f.expired = false }
func (f *fakeIdle) Expired() bool { return f.expired }

type rig struct {
	m        *Model
	status   *fakeStatus
	vms      *fakeScreen
	net      *fakeScreen
	idle     *fakeIdle
	logins   []string
	released int
	holder   string // non-empty: another console holds the lock
	lockErr  error  // non-nil: the lock cannot be read
	locks    int    // acquisitions tried
	now      time.Time
	clears   int // whole-screen repaints the model asked for
}

func newRig(t *testing.T, tier term.Tier, opts Options) *rig {
	t.Helper()
	r := &rig{vms: &fakeScreen{title: "Virtual machines"}, net: &fakeScreen{title: "Network"}, idle: &fakeIdle{}, now: fixedNow}
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Now = func() time.Time { return r.now }
	k := c.Keys
	pages := []Page{{Key: k.VMs, Tab: "VMs", Screen: r.vms}, {Key: k.Network, Tab: "Network", Screen: r.net}}
	a := LoginFunc(func(ctx context.Context, user, password, tty string) (string, error) {
		r.logins = append(r.logins, user+"@"+tty)
		switch {
		case user == "alice" && password == "s3cret":
			return user, nil
		case user == "bob":
			return "", auth.ErrNotAdmin
		case user == "mallory":
			return "", &auth.RateLimitError{RetryAfter: 20 * time.Second}
		}
		return "", auth.ErrBadCredentials
	})
	lk := func(user, tty string) (func() error, string, error) {
		r.locks++
		if r.lockErr != nil {
			return nil, "", r.lockErr
		}
		if r.holder != "" {
			return nil, r.holder, nil
		}
		return func() error { r.released++; return nil }, "", nil
	}
	if opts.TTY == "" {
		opts.TTY = "tty1"
	}
	opts.Product, opts.Version = "virtcon", "0.4.0"
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 5 * time.Minute
	}
	r.status = &fakeStatus{}
	r.m = New(c, r.status, pages, a, lk, r.idle, opts)
	r.m.SetSize(80, 24)
	return r
}

// run delivers msg and runs the returned commands (not ticks) to completion.
func (r *rig) run(msg tea.Msg) {
	_, cmd := r.m.Update(msg)
	r.drain(cmd, 0)
}

func (r *rig) drain(cmd tea.Cmd, depth int) {
	if cmd == nil || depth > 4 {
		return
	}
	done := make(chan tea.Msg, 1)
	go func() { done <- cmd() }()
	var msg tea.Msg
	select {
	case msg = <-done:
	case <-time.After(20 * time.Millisecond):
		return // a timer (tick, blink): not part of this step
	}
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			r.drain(c, depth+1)
		}
	case appTickMsg:
	default:
		if msg == tea.ClearScreen() {
			r.clears++
			return
		}
		_, next := r.m.Update(msg)
		r.drain(next, depth+1)
	}
}

func (r *rig) typeText(s string) {
	for _, k := range tuitest.Type(s) {
		r.run(k)
	}
}

func (r *rig) login(user, pass string) {
	r.run(tuitest.Key("l"))
	r.typeText(user)
	r.run(tuitest.Key("tab"))
	r.typeText(pass)
	r.run(tuitest.Key("enter"))
}

func (r *rig) screen() string { return ansi.Strip(r.m.Render()) }

func TestLoggedOutNavigationNeedsLogin(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.run(tuitest.Key("v"))
	if got := r.screen(); !strings.Contains(got, "log in first (F2/l) to open Virtual machines") {
		t.Errorf("screen lacks the log-in-first message:\n%s", got)
	}
	if r.vms.activated != 0 {
		t.Errorf("VMs screen activated %d times before login", r.vms.activated)
	}
}

func TestLoginSuccessTakesWriterLock(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.login("alice", "s3cret")
	se := r.m.Session()
	if se.User != "alice" || !se.Writer {
		t.Fatalf("session = %+v; want alice holding the writer lock", *se)
	}
	if got := r.logins; len(got) != 1 || got[0] != "alice@tty1" {
		t.Errorf("logins = %v; want [alice@tty1]", got)
	}
	if got := r.screen(); !strings.Contains(got, "alice@tty1 [RW]") || !strings.Contains(got, "[F3/s Status]") {
		t.Errorf("header/tabs wrong after login:\n%s", got)
	}
	r.run(tuitest.Key("v"))
	if r.vms.activated != 1 {
		t.Errorf("VMs activated %d times; want 1", r.vms.activated)
	}
	if got := r.screen(); !strings.Contains(got, "Virtual machines content") || !strings.Contains(got, "CLI: virt vm list") {
		t.Errorf("VMs page not shown with its CLI line:\n%s", got)
	}
	r.run(tuitest.Key("a"))
	if got := r.vms.keys; len(got) != 1 || got[0] != "a" {
		t.Errorf("screen keys = %v; want [a]", got)
	}
	r.run(tuitest.Key("x"))
	if r.m.Session().LoggedIn() || r.released != 1 {
		t.Errorf("after logout: session %+v, released %d; want nobody, 1", *r.m.Session(), r.released)
	}
}

func TestLoginFailures(t *testing.T) {
	tests := []struct {
		user, pass string
		want       []string
	}{
		{"alice", "S3CRET", []string{"Login incorrect", "Caps Lock"}},
		{"nobody-here", "x", []string{"Login incorrect", "Caps Lock"}},
		{"bob", "pw", []string{"only root and members of group virtcon-admin"}},
		{"mallory", "pw", []string{"too many failed logins: try again in 20s"}},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			r := newRig(t, term.Plain, Options{})
			r.login(tt.user, tt.pass)
			if r.m.Session().LoggedIn() {
				t.Fatalf("logged in as %q", r.m.Session().User)
			}
			got := r.screen()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("screen lacks %q:\n%s", w, got)
				}
			}
			if strings.Contains(got, tt.pass) && len(tt.pass) > 2 {
				t.Errorf("screen shows the password %q", tt.pass)
			}
			if v := r.m.form.pass.Value(); v != "" {
				t.Errorf("password field still holds %q after submit", v)
			}
		})
	}
}

func TestSecondConsoleIsReadOnly(t *testing.T) {
	r := newRig(t, term.Rich, Options{TTY: "ttyS0"})
	r.holder = "alice on tty1 since 09:12"
	r.login("alice", "s3cret")
	se := r.m.Session()
	if !se.LoggedIn() || se.Writer || se.CanWrite() {
		t.Fatalf("session = %+v; want logged in, read-only", *se)
	}
	got := r.screen()
	for _, w := range []string{"alice@ttyS0 [RO]", "read-only: alice on tty1 since 09:12 holds the console lock"} {
		if !strings.Contains(got, w) {
			t.Errorf("screen lacks %q:\n%s", w, got)
		}
	}
	// the holder leaves: the read-only console takes the lock over
	r.holder = ""
	for i := 0; i < 5; i++ {
		r.run(appTickMsg{})
	}
	if !r.m.Session().Writer {
		t.Errorf("read-only console did not take the free lock over")
	}
}

// TestReadOnlyWarningOnce: the read-only warning shows once per change of
// the read-only state (another console's holder, an error reading the
// lock), not on every screen and every retry of the lock after it; the
// header's [RO] says it all the time.
func TestReadOnlyWarningOnce(t *testing.T) {
	r := newRig(t, term.Plain, Options{TTY: "ttyS0"})
	r.holder = "alice on tty1 since 09:12"
	r.login("alice", "s3cret")
	msgLine := func() string { return strings.Split(r.screen(), "\n")[19] }
	ticks := func(n int) {
		for range n {
			r.run(appTickMsg{})
		}
	}
	if got := msgLine(); !strings.Contains(got, "read-only: alice on tty1 since 09:12") {
		t.Fatalf("message line after a read-only login = %q; want the warning", got)
	}
	steps := []struct {
		name string
		do   func()
		want string // on the message line; "" for nothing
	}{
		{"another page", func() { r.run(tuitest.Key("v")) }, ""},
		{"keys", func() { r.run(tuitest.Key("j")); r.run(tuitest.Key("k")) }, ""},
		{"retries of the lock, same holder", func() { ticks(15) }, ""},
		{"back to the first page", func() { r.run(tuitest.Key("s")); r.run(tuitest.Key("n")) }, ""},
		{"the holder changes", func() { r.holder = "bob on tty2 since 10:01"; ticks(5) }, "read-only: bob on tty2 since 10:01"},
		{"another page again", func() { r.run(tuitest.Key("v")) }, ""},
		{"retries, same new holder", func() { ticks(10) }, ""},
		{"the lock cannot be read", func() { r.lockErr = errors.New("permission denied"); ticks(5) }, "console lock: permission denied (read-only)"},
		{"past it", func() { r.run(tuitest.Key("n")) }, ""},
		{"retries, same error", func() { ticks(10) }, ""},
	}
	for _, st := range steps {
		st.do()
		got := msgLine()
		if st.want == "" && (strings.Contains(got, "read-only") || strings.Contains(got, "console lock")) {
			t.Errorf("%s: message line %q; want the read-only warning gone", st.name, got)
		}
		if st.want != "" && !strings.Contains(got, st.want) {
			t.Errorf("%s: message line %q; want %q", st.name, got, st.want)
		}
		if !strings.Contains(r.screen(), "alice@ttyS0 [RO]") {
			t.Errorf("%s: the header does not say [RO]:\n%s", st.name, r.screen())
		}
	}
	if r.locks < 8 {
		t.Errorf("%d lock acquisitions; want the retries to have run", r.locks)
	}
	// logged out and in again: news again
	r.lockErr = nil
	r.run(tuitest.Key("x"))
	r.login("alice", "s3cret")
	if got := msgLine(); !strings.Contains(got, "read-only: bob on tty2") {
		t.Errorf("message line after logging in again = %q; want the warning", got)
	}
}

func TestIdleLock(t *testing.T) {
	r := newRig(t, term.Rich, Options{IdleTimeout: 5 * time.Minute})
	r.login("alice", "s3cret")
	r.run(tuitest.Key("v"))
	r.idle.expired = true
	r.run(appTickMsg{})
	if r.m.Session().LoggedIn() {
		t.Fatalf("still logged in after the idle timeout")
	}
	if r.released != 1 {
		t.Errorf("console lock released %d times; want 1", r.released)
	}
	got := r.screen()
	for _, w := range []string{"Console locked", "Console locked (after 5 minutes without input)", "F2/l"} {
		if !strings.Contains(got, w) {
			t.Errorf("locked screen lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "Virtual machines content") {
		t.Errorf("locked screen still shows the VMs page")
	}
	// unlocking offers the same user
	r.run(tuitest.Key("l"))
	if v := r.m.form.user.Value(); v != "alice" {
		t.Errorf("unlock form user = %q; want alice", v)
	}
}

// TestIdleKeyAfterTimeoutLocks: a key pressed after the timeout but
// before the clock tick noticed it locks instead of counting as activity.
func TestIdleKeyAfterTimeoutLocks(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.login("alice", "s3cret")
	r.run(tuitest.Key("v"))
	r.idle.expired = true
	r.run(tuitest.Key("a"))
	if r.m.Session().LoggedIn() {
		t.Fatal("a key after the idle timeout kept the session")
	}
	if len(r.vms.keys) != 0 {
		t.Errorf("the VMs screen got %v after the timeout", r.vms.keys)
	}
}

func TestCapturingScreenGetsLetters(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.login("alice", "s3cret")
	r.run(tuitest.Key("n"))
	r.net.capturing = true
	r.run(tuitest.Key("v")) // typed into the form, not navigation
	r.run(tuitest.Key("q"))
	if got := strings.Join(r.net.keys, ","); got != "v,q" {
		t.Errorf("capturing screen got keys %q; want v,q", got)
	}
	if r.m.page != 1 {
		t.Errorf("page = %d; want 1 (network)", r.m.page)
	}
	r.run(tuitest.Key("f4")) // function keys stay global
	if r.m.page != 0 {
		t.Errorf("F4 while capturing: page = %d; want 0 (VMs)", r.m.page)
	}
}

func TestKioskDoesNotQuit(t *testing.T) {
	for _, k := range []string{"q", "f10", "ctrl+c"} {
		r := newRig(t, term.Linux, Options{Kiosk: true})
		_, cmd := r.m.Update(tuitest.Key(k))
		if cmd != nil {
			if _, ok := cmd().(tea.QuitMsg); ok {
				t.Errorf("%s quit the host console", k)
			}
		}
		if !strings.Contains(r.screen(), "does not quit") {
			t.Errorf("%s: no explanation shown", k)
		}
	}
	r := newRig(t, term.Rich, Options{})
	_, cmd := r.m.Update(tuitest.Key("q"))
	if cmd == nil {
		t.Fatal("q returned no command outside kiosk mode")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Errorf("q did not quit outside kiosk mode")
	}
}

// quits reports whether cmd quits the program.
func quits(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

// trialNetScreen is a page that knows of a network change on trial.
type trialNetScreen struct {
	fakeScreen
	pending *netcfg.Pending
}

func (f *trialNetScreen) PendingTry() *netcfg.Pending { return f.pending }

// TestQuitAsksDuringTrial: while a network change is on trial, the quit
// keys ask first, saying when it rolls back; y quits, any other key
// cancels. Without one they quit at once.
func TestQuitAsksDuringTrial(t *testing.T) {
	trial := &netcfg.Pending{ID: "t1", Started: fixedNow.Add(-18 * time.Second), Deadline: fixedNow.Add(42 * time.Second)}
	for _, quit := range []string{"q", "f10", "ctrl+c"} {
		for _, answer := range []string{"y", "Y", "n", "N", "enter", "esc", "q", "f10", "x"} {
			t.Run(quit+"-"+answer, func(t *testing.T) {
				r := newRig(t, term.Plain, Options{})
				r.status.pending = trial
				_, cmd := r.m.Update(tuitest.Key(quit))
				if quits(cmd) {
					t.Fatalf("%s quit at once with a change on trial", quit)
				}
				scr := r.screen()
				for _, w := range []string{"A network change is on trial and rolls back in 0:42 unless kept.",
					"Quit anyway? y/N", "Press y to quit anyway; any other key cancels.", "virt net confirm"} {
					if !strings.Contains(scr, w) {
						t.Errorf("the question lacks %q:\n%s", w, scr)
					}
				}
				_, cmd = r.m.Update(tuitest.Key(answer))
				want := answer == "y" || answer == "Y"
				if got := quits(cmd); got != want {
					t.Errorf("%s then %s: quit %v; want %v", quit, answer, got, want)
				}
				if !want {
					if scr := r.screen(); strings.Contains(scr, "Quit anyway") || !strings.Contains(scr, "quit cancelled") {
						t.Errorf("%s then %s: the question stays or no word of the cancel:\n%s", quit, answer, scr)
					}
					if r.m.Session().LoggedIn() != false || r.m.mode != modeStatus {
						t.Errorf("%s then %s did something else: mode %d", quit, answer, r.m.mode)
					}
				}
			})
		}
	}

	// logged in, on a page; the Network screen knows of the trial first
	r := newRig(t, term.Rich, Options{})
	net := &trialNetScreen{fakeScreen: fakeScreen{title: "Network"}, pending: trial}
	r.m.pages[1].Screen = net
	r.login("alice", "s3cret")
	r.run(tuitest.Key("n"))
	_, cmd := r.m.Update(tuitest.Key("f10"))
	if quits(cmd) || !strings.Contains(r.screen(), "rolls back in 0:42") {
		t.Fatalf("f10 with a trial the Network screen knows of did not ask:\n%s", r.screen())
	}
	r.run(tuitest.Key("k")) // cancels; the screen does not get it
	if len(net.keys) != 0 {
		t.Errorf("the cancelling key reached the screen: %v", net.keys)
	}
	if _, cmd := r.m.Update(tuitest.Key("f10")); quits(cmd) {
		t.Fatal("f10 quit without asking again")
	}
	if _, cmd := r.m.Update(tuitest.Key("y")); !quits(cmd) {
		t.Error("y did not quit")
	}
	if r.released != 1 {
		t.Errorf("console lock released %d times on quit; want 1", r.released)
	}

	// no trial: quit at once
	r = newRig(t, term.Rich, Options{})
	if _, cmd := r.m.Update(tuitest.Key("f10")); !quits(cmd) {
		t.Error("f10 without a trial did not quit")
	}
	// the host console never quits, trial or not
	r = newRig(t, term.Rich, Options{Kiosk: true})
	r.status.pending = trial
	if _, cmd := r.m.Update(tuitest.Key("q")); quits(cmd) || !strings.Contains(r.screen(), "does not quit") {
		t.Errorf("kiosk q with a trial: quit or no explanation:\n%s", r.screen())
	}
}

func TestTickGoesToVisibleScreenOnly(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.login("alice", "s3cret")
	r.run(tuitest.Key("v"))
	r.run(appTickMsg{})
	if r.vms.ticks != 1 || r.net.ticks != 0 {
		t.Errorf("ticks vms=%d net=%d; want 1, 0", r.vms.ticks, r.net.ticks)
	}
}

func TestScreensGetContentSize(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	if r.vms.w != 76 || r.vms.h != 16 {
		t.Errorf("content size %dx%d; want 76x16", r.vms.w, r.vms.h)
	}
	r.m.Update(tea.WindowSizeMsg{Width: 0, Height: 0})
	tuitest.CheckSize(t, r.m.Render(), 80, 24)
}

func TestGolden(t *testing.T) {
	steps := map[string]func(r *rig){
		"status":   func(r *rig) {},
		"login":    func(r *rig) { r.run(tuitest.Key("l")); r.typeText("alice") },
		"badlogin": func(r *rig) { r.login("alice", "wrong") },
		"pages":    func(r *rig) { r.login("alice", "s3cret"); r.run(tuitest.Key("v")) },
		"readonly": func(r *rig) { r.holder = "alice on tty1 since 09:12"; r.login("alice", "s3cret") },
		"locked":   func(r *rig) { r.login("alice", "s3cret"); r.idle.expired = true; r.run(appTickMsg{}) },
		"help":     func(r *rig) { r.login("alice", "s3cret"); r.run(tuitest.Key("v")); r.run(tuitest.Key("h")) },
		"quit-during-trial": func(r *rig) {
			r.status.pending = &netcfg.Pending{ID: "t1", Deadline: fixedNow.Add(42 * time.Second)}
			r.login("alice", "s3cret")
			r.run(tuitest.Key("f10"))
		},
	}
	for name, step := range steps {
		for _, tier := range tuitest.GoldenTiers {
			t.Run(name+"-"+tier.String(), func(t *testing.T) {
				r := newRig(t, tier, Options{})
				step(r)
				tuitest.RequireGolden(t, tier, r.m.Render(), 80, 24)
			})
		}
	}
}

func TestDescribeUnknownError(t *testing.T) {
	msg, _ := Describe(errors.New("pam: service unavailable"), "virtcon-admin")
	if msg != "login failed: pam: service unavailable" {
		t.Errorf("got %q", msg)
	}
}

// TestEscCancelsLoginInFlight: the operator presses esc while PAM still
// runs and walks away; the late success must not log the console in.
func TestEscCancelsLoginInFlight(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.run(tuitest.Key("l"))
	r.typeText("alice")
	r.run(tuitest.Key("tab"))
	r.typeText("s3cret")
	_, cmd := r.m.Update(tuitest.Key("enter"))
	if cmd == nil {
		t.Fatal("enter started no login")
	}
	r.run(tuitest.Key("esc"))
	msg := cmd() // PAM answers after the esc
	r.m.Update(msg)
	if se := r.m.Session(); se.LoggedIn() || se.Writer {
		t.Fatalf("session after a cancelled login = %+v; want nobody", *se)
	}
	if r.m.mode != modeStatus {
		t.Errorf("mode %d; want the status screen", r.m.mode)
	}
}

// TestOneLockAcquisitionAtATime: a tick's retry while the login's
// acquisition is in flight must not race it (the loser would see its own
// process as the holder and leave the console read-only).
func TestOneLockAcquisitionAtATime(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.m.mode = modePages
	r.m.c.Session.User = "alice"
	first := r.m.acquire(false)
	if first == nil {
		t.Fatal("no acquisition started")
	}
	if second := r.m.acquire(true); second != nil {
		t.Fatal("a second acquisition started while the first is in flight")
	}
	r.m.Update(first())
	if !r.m.Session().Writer {
		t.Fatal("the first acquisition did not make the console the writer")
	}
	if again := r.m.acquire(true); again != nil {
		t.Error("an acquisition started while this console holds the lock")
	}
	// a stale failure result (from before) does not demote the writer
	r.m.Update(lockResultMsg{holder: "alice on tty1 since 09:12", retry: true})
	if !r.m.Session().Writer {
		t.Error("a stale failure made the writer read-only")
	}
}

// TestPasteAfterIdleTimeoutLocks: like a key, a paste after the timeout
// locks instead of reaching the page.
func TestPasteAfterIdleTimeoutLocks(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.login("alice", "s3cret")
	r.run(tuitest.Key("n"))
	r.idle.expired = true
	r.run(tea.PasteMsg{Content: "10.0.0.1"})
	if r.m.Session().LoggedIn() {
		t.Fatal("a paste after the idle timeout kept the session")
	}
}

// TestScreenActivityAndLock: a screen that had the terminal (a VM
// console) reports activity the app did not see, or asks to lock.
func TestScreenActivityAndLock(t *testing.T) {
	r := newRig(t, term.Rich, Options{})
	r.login("alice", "s3cret")
	r.idle.expired = true
	r.run(common.ActivityMsg{})
	if r.idle.expired {
		t.Error("ActivityMsg did not restart the idle timer")
	}
	r.run(common.LockMsg{Why: "after 5m0s without input in a VM console"})
	if r.m.Session().LoggedIn() {
		t.Fatal("LockMsg did not lock")
	}
	if !strings.Contains(r.screen(), "without input in a VM console") {
		t.Errorf("lock reason not shown:\n%s", r.screen())
	}
}

// TestLoggedInWebSession: a web terminal's session starts logged in (no
// PAM here: its server ran it) and takes the console lock like a login;
// a second one is read-only and names the holder; logout and lock end
// the program, and with it the web session.
func TestLoggedInWebSession(t *testing.T) {
	r := newRig(t, term.Rich, Options{TTY: "web/1a2b3c4d", LoggedIn: "alice"})
	r.drain(r.m.Init(), 0)
	se := r.m.Session()
	if se.User != "alice" || !se.Writer || r.locks != 1 {
		t.Fatalf("session %+v after %d lock attempts; want alice holding the writer lock", *se, r.locks)
	}
	if len(r.logins) != 0 {
		t.Errorf("PAM asked %v; want no login", r.logins)
	}
	if got := r.screen(); !strings.Contains(got, "alice@web/1a2b3c4d [RW]") {
		t.Errorf("header lacks alice@web/1a2b3c4d [RW]:\n%s", got)
	}
	r.run(tuitest.Key("v"))
	if r.vms.activated != 1 {
		t.Errorf("VMs activated %d times; want 1 (logged in)", r.vms.activated)
	}
	for _, k := range []string{"x", "l"} {
		r.m.loggedOut = false
		_, cmd := r.m.Update(tuitest.Key(k))
		if !quits(cmd) {
			t.Errorf("%s in a web session: does not quit; want the program (and the web session) to end", k)
		}
		if !r.m.LoggedOut() {
			t.Errorf("%s in a web session: LoggedOut false; want true (the web terminal ends the whole login)", k)
		}
	}
	if r.released == 0 {
		t.Error("the console lock was not given back on the way out")
	}
	q := newRig(t, term.Plain, Options{TTY: "web/9a9b9c9d", LoggedIn: "alice"})
	q.drain(q.m.Init(), 0)
	if _, cmd := q.m.Update(tuitest.Key("q")); !quits(cmd) || q.m.LoggedOut() {
		t.Errorf("q in a web session: quits %v, LoggedOut %v; want a quit that is no logout (that tab only)", quits(cmd), q.m.LoggedOut())
	}

	ro := newRig(t, term.Plain, Options{TTY: "web/5e6f7a8b", LoggedIn: "bob"})
	ro.holder = "alice on web/1a2b3c4d since 09:12"
	ro.drain(ro.m.Init(), 0)
	if se := ro.m.Session(); se.User != "bob" || se.Writer {
		t.Fatalf("second web session %+v; want bob, read-only", *se)
	}
	if got := ro.screen(); !strings.Contains(got, "read-only: alice on web/1a2b3c4d since 09:12 holds the console lock") {
		t.Errorf("second web session does not name the holder:\n%s", got)
	}
}
