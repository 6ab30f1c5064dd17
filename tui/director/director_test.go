package director

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

// width x height is the content area of the 80x24 frame.
const width, height = 76, 16

var now = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

const (
	secret   = "q8w7e6r5t4y3u2i1o0p9a8s7d6f5g4h3"
	pin      = "sha256:3a5f9c017e44b2d80c61af9325e87b4d10c29e58f63ba711d4826e0fb95ac327"
	addr     = "director.example.org:9443"
	goodJoin = "vcj1:k7m2p9q4." + secret + "@" + addr + "#" + pin
	nodeID   = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
)

func connected() *Status {
	return &Status{Enrolled: true, Director: addr, NodeID: nodeID, Pin: pin,
		CertNotAfter: now.Add(30 * 24 * time.Hour), Running: true, State: StateConnected,
		LastHeartbeatAck: now.Add(-7 * time.Second)}
}

func revoked() *Status {
	st := connected()
	st.Running, st.State = false, StateRevoked
	st.LastError = "session: unauthenticated: revoked"
	st.Alert, st.AlertAt, st.AlertReason = AlertRevoked, now.Add(-14*time.Minute), "revoked by admin@director: decommissioned"
	return st
}

// fake is the agent: a status to read and an enrolment that records the
// join it got.
type fake struct {
	mu        sync.Mutex
	st        *Status
	stErr     error
	enrollErr error
	joins     []enroll.Join
}

func (f *fake) sources() Sources {
	return Sources{
		Status: func() (*Status, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.st, f.stErr
		},
		Enroll: func(_ context.Context, j enroll.Join) (*Status, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.joins = append(f.joins, j)
			if f.enrollErr != nil {
				return nil, f.enrollErr
			}
			f.st = &Status{Enrolled: true, Director: j.Addr(), NodeID: nodeID, Pin: j.Pin(),
				CertNotAfter: now.Add(30 * 24 * time.Hour), State: StateStopped}
			return f.st, nil
		},
	}
}

func newModelLog(t *testing.T, tier term.Tier, f *fake, writer bool, log *slog.Logger) *Model {
	c := common.New(t.Context(), tier, log)
	c.Now = func() time.Time { return now }
	c.Session = &common.Session{User: "alice", TTY: "tty1", Writer: writer, Holder: "bob on tty2 since 09:12"}
	m := New(c, f.sources())
	m.SetSize(width, height)
	return m
}

func newModel(t *testing.T, tier term.Tier, f *fake, writer bool) *Model {
	return newModelLog(t, tier, f, writer, testutil.Logger(t))
}

// send delivers msg and runs the Cmds that follow from it synchronously.
func send(m *Model, msg tea.Msg) {
	_, cmd := m.Update(msg)
	for i := 0; cmd != nil; i++ {
		if i == 100 {
			panic("a chain of more than 100 commands")
		}
		msg := cmd()
		if _, ok := msg.(tea.BatchMsg); ok {
			return // the field's cursor: nothing of the screen's
		}
		_, cmd = m.Update(msg)
	}
}

func press(m *Model, keys ...string) {
	for _, k := range tuitest.Keys(keys...) {
		send(m, k)
	}
}

func typeText(m *Model, s string) {
	for _, k := range tuitest.Type(s) {
		send(m, k)
	}
}

func view(m *Model) string { return m.View().Content }

func states(t *testing.T, tier term.Tier) map[string]string {
	t.Helper()
	out := map[string]string{}
	open := func(f *fake, writer bool) *Model {
		m := newModel(t, tier, f, writer)
		send(m, common.ActivateMsg{})
		return m
	}

	none := open(&fake{st: &Status{}}, true)
	out["not_enrolled"] = view(none)
	out["connected"] = view(open(&fake{st: connected()}, true))
	out["revoked"] = view(open(&fake{st: revoked()}, true))
	backoff := connected()
	backoff.State, backoff.LastError = StateBackoff, "dial tcp 192.0.2.7:9443: connect: connection refused"
	out["backoff"] = view(open(&fake{st: backoff}, true))
	stopped := connected()
	stopped.Running, stopped.State, stopped.LastHeartbeatAck = false, StateStopped, time.Time{}
	out["not_running"] = view(open(&fake{st: stopped}, true))
	out["unreadable"] = view(open(&fake{stErr: errors.New("read /etc/virtcon/agent/agent.yaml: permission denied")}, true))
	out["read_only"] = view(open(&fake{st: &Status{}}, false))

	paste := open(&fake{st: &Status{}}, true)
	press(paste, "e")
	typeText(paste, goodJoin)
	out["paste_masked"] = view(paste)
	press(paste, "enter")
	out["confirm"] = view(paste)

	bad := open(&fake{st: &Status{}}, true)
	press(bad, "e")
	typeText(bad, "vcj1:k7m2p9q4."+secret[:20]+"@"+addr+"#"+pin)
	press(bad, "enter")
	out["parse_error"] = view(bad)

	noPin := open(&fake{st: &Status{}}, true)
	press(noPin, "enter")
	send(noPin, tea.PasteMsg{Content: "vcj1:k7m2p9q4." + secret + "@" + addr + "\n"})
	press(noPin, "enter")
	out["no_pin"] = view(noPin)

	enrolling := open(&fake{st: &Status{}}, true)
	press(enrolling, "e")
	typeText(enrolling, goodJoin)
	press(enrolling, "enter")
	_, _ = enrolling.Update(tuitest.Key("y")) // the Cmd is not run: in flight
	out["enrolling"] = view(enrolling)

	done := open(&fake{st: &Status{}}, true)
	press(done, "e")
	typeText(done, goodJoin)
	press(done, "enter", "y")
	out["enrolled"] = view(done)

	failed := open(&fake{st: &Status{}, enrollErr: errors.New(`enrol with director.example.org:9443: the director's CA does not match the pin (got sha256:0c61af93…, want sha256:3a5f9c01…)`)}, true)
	press(failed, "e")
	typeText(failed, goodJoin)
	press(failed, "enter", "y")
	out["enrol_failed"] = view(failed)
	return out
}

func TestGolden(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		for name, out := range states(t, tier) {
			t.Run(tier.String()+"_"+name, func(t *testing.T) {
				tuitest.RequireGolden(t, tier, out, width, height)
			})
		}
	}
}

func TestLinuxFits(t *testing.T) {
	for name, out := range states(t, term.Linux) {
		t.Run(name, func(t *testing.T) { tuitest.CheckSize(t, out, width, height) })
	}
}

// TestStatesSay: each state says what it is in words (colour is never
// the only signal).
func TestStatesSay(t *testing.T) {
	wants := map[string][]string{
		"not_enrolled": {"not enrolled", "virt-director token create", "e  Enrol"},
		"connected":    {"enrolled with " + addr, nodeID, "CA pin       " + pin[:39], pin[39:], "valid until 2026-04-13 09:26 (in 30 days)", "[PASS] connected to " + addr, "last answered 09:26:46 (7s ago)"},
		"revoked":      {"[FAIL] REVOKED at 2026-03-14 09:12 - VMs untouched; re-enrol", "reason: revoked by admin@director: decommissioned", "[FAIL] revoked", "Press e to enrol again with a new join string", "e  Enrol"},
		"backoff":      {"[WARN] not connected", "connection refused"},
		"not_running":  {"agent not running", "Start        " + StartCommand + " (or " + AltStart + ")"},
		"unreadable":   {"[????] the agent's status could not be read", "permission denied"},
		"read_only":    {"read-only: bob on tty2 since 09:12 holds the console lock"},
		"paste_masked": {"Join string", "****", fmt.Sprint(len(goodJoin), " characters")},
		"confirm":      {"Director     " + addr, "k7m2p9q4", "sha256:3a5f9c017e44b2d8~", "Check this pin with the director's admin", "Press y to enrol with " + addr},
		"parse_error":  {"[FAIL] join string: secret:"},
		"no_pin":       {"[FAIL] join string: pin: missing", "--unsafe-skip-ca-pin"},
		"enrolling":    {"[INFO] enrolling with " + addr + "..."},
		"enrolled":     {"[PASS] enrolled with " + addr, "as node " + nodeID, StartCommand, AltStart},
		"enrol_failed": {"[FAIL] enrolment failed:", "does not match the pin"},
	}
	got := states(t, term.Plain)
	for name, ws := range wants {
		text := ansi.Strip(got[name])
		for _, w := range ws {
			if !strings.Contains(strings.Join(strings.Fields(text), " "), strings.Join(strings.Fields(w), " ")) {
				t.Errorf("%s lacks %q:\n%s", name, w, text)
			}
		}
	}
	if len(got) != len(wants) {
		t.Errorf("%d states; %d checked", len(got), len(wants))
	}
}

// TestSecretNeverDrawn types, pastes, submits, confirms and fails join
// strings, rendering every frame in every tier, and scans each frame
// and the log for the secret (and for any 8 characters of it in a row).
func TestSecretNeverDrawn(t *testing.T) {
	pieces := []string{secret}
	for i := 0; i+8 <= len(secret); i++ {
		pieces = append(pieces, secret[i:i+8])
	}
	check := func(t *testing.T, what, text string) {
		t.Helper()
		text = ansi.Strip(text)
		for _, p := range pieces {
			if strings.Contains(text, p) {
				t.Fatalf("%s shows %q of the secret:\n%s", what, p, text)
			}
		}
	}
	joins := map[string]string{
		"good":             goodJoin,
		"short secret":     "vcj1:k7m2p9q4." + secret[:31] + "@" + addr + "#" + pin,
		"long secret":      "vcj1:k7m2p9q4." + secret + "x@" + addr + "#" + pin,
		"upper secret":     "vcj1:k7m2p9q4." + strings.ToUpper(secret[:1]) + secret[1:] + "@" + addr + "#" + pin,
		"secret, no id":    "vcj1:" + secret + "@" + addr + "#" + pin,
		"no address":       "vcj1:k7m2p9q4." + secret + "#" + pin,
		"secret as host":   "vcj1:k7m2p9q4." + secret[:31] + "@" + secret + ":9443#" + pin,
		"no pin":           "vcj1:k7m2p9q4." + secret + "@" + addr,
		"bad pin":          "vcj1:k7m2p9q4." + secret + "@" + addr + "#sha256:zz",
		"no prefix":        "k7m2p9q4." + secret + "@" + addr + "#" + pin,
		"secret in prefix": secret + "@" + addr,
	}
	for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
		for name, join := range joins {
			for _, how := range []string{"typed", "pasted"} {
				t.Run(tier.String()+"/"+name+"/"+how, func(t *testing.T) {
					var log bytes.Buffer
					f := &fake{st: &Status{}, enrollErr: errors.New("enrol with " + addr + ": token refused")}
					m := newModelLog(t, tier, f, true, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
					frame := func(step string) {
						check(t, step+" frame", view(m))
						check(t, step+" CLI line", m.CLI())
					}
					send(m, common.ActivateMsg{})
					press(m, "e")
					frame("open")
					if how == "typed" {
						for _, k := range tuitest.Type(join) {
							send(m, k)
							frame("typing")
						}
					} else {
						send(m, tea.PasteMsg{Content: join + "\n"})
						frame("pasted")
					}
					press(m, "enter")
					frame("submitted")
					press(m, "y")
					frame("confirmed")
					send(m, common.TickMsg{Now: now})
					frame("after")
					check(t, "log", log.String())
					if name == "good" && len(f.joins) != 1 {
						t.Errorf("enrolments %d; want 1", len(f.joins))
					}
				})
			}
		}
	}
}

// TestSecretForgotten: once the enrolment starts, neither the field nor
// the screen holds the secret; a cancelled one leaves nothing either.
func TestSecretForgotten(t *testing.T) {
	for _, keysAfter := range [][]string{{"enter", "y"}, {"enter", "n"}, {"esc"}, {"enter", "esc"}} {
		t.Run(strings.Join(keysAfter, "+"), func(t *testing.T) {
			m := newModel(t, term.Plain, &fake{st: &Status{}}, true)
			send(m, common.ActivateMsg{})
			press(m, "e")
			send(m, tea.PasteMsg{Content: goodJoin})
			press(m, keysAfter...)
			if v := m.field.Value(); v != "" {
				t.Errorf("field holds %d characters after %v; want none", len(v), keysAfter)
			}
			if m.join.Secret() != "" {
				t.Errorf("the screen still holds the join after %v", keysAfter)
			}
		})
	}
}

// TestEnrolGuards: enrolment is refused on a read-only console, over a
// status that could not be read, and over a good enrolment; it goes
// ahead when not enrolled, or revoked, or expired; only y confirms.
func TestEnrolGuards(t *testing.T) {
	expired := connected()
	expired.CertNotAfter = now.Add(-time.Hour)
	expiredAlert := connected()
	expiredAlert.Running, expiredAlert.State, expiredAlert.Alert, expiredAlert.AlertAt = false, StateExpired, AlertExpired, now.Add(-time.Hour)
	tests := []struct {
		name   string
		f      *fake
		writer bool
		keys   []string
		joins  int
		note   string
	}{
		{"not enrolled: e, paste, enter, y", &fake{st: &Status{}}, true, []string{"e"}, 1, ""},
		{"enter opens too", &fake{st: &Status{}}, true, []string{"enter"}, 1, ""},
		{"revoked may enrol again", &fake{st: revoked()}, true, []string{"e"}, 1, ""},
		{"expired may enrol again", &fake{st: expired}, true, []string{"e"}, 1, ""},
		{"expired alert may enrol again", &fake{st: expiredAlert}, true, []string{"e"}, 1, ""},
		{"read-only refused", &fake{st: &Status{}}, false, []string{"e"}, 0, "enrol refused: read-only"},
		{"unreadable refused", &fake{stErr: errors.New("permission denied")}, true, []string{"e"}, 0, "could not be read"},
		{"enrolled and fine refused", &fake{st: connected()}, true, []string{"e"}, 0, "virt agent leave first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newModel(t, term.Plain, tc.f, tc.writer)
			send(m, common.ActivateMsg{})
			press(m, tc.keys...)
			send(m, tea.PasteMsg{Content: goodJoin})
			press(m, "enter", "y")
			if len(tc.f.joins) != tc.joins {
				t.Errorf("enrolments %d; want %d", len(tc.f.joins), tc.joins)
			}
			if tc.joins == 1 && tc.f.joins[0].Format() != goodJoin {
				t.Errorf("enrolled with %v; want the pasted join", tc.f.joins[0])
			}
			if tc.note != "" && !strings.Contains(m.note, tc.note) {
				t.Errorf("note %q; want it to say %q", m.note, tc.note)
			}
		})
	}
	for _, k := range []string{"n", "enter", "esc", "e", "1"} {
		t.Run("confirm cancelled by "+k, func(t *testing.T) {
			f := &fake{st: &Status{}}
			m := newModel(t, term.Plain, f, true)
			send(m, common.ActivateMsg{})
			press(m, "e")
			send(m, tea.PasteMsg{Content: goodJoin})
			press(m, "enter", k)
			if len(f.joins) != 0 || m.step != stepNone {
				t.Errorf("after %s: enrolments %d, step %d; want none, back to the status", k, len(f.joins), m.step)
			}
		})
	}
}

// TestCapturing: the field and the confirmation take every key (a join
// string's letters are global keys too); the status view and the
// enrolment in flight do not.
func TestCapturing(t *testing.T) {
	m := newModel(t, term.Plain, &fake{st: &Status{}}, true)
	send(m, common.ActivateMsg{})
	if m.Capturing() {
		t.Error("captures on the status view")
	}
	press(m, "e")
	if !m.Capturing() {
		t.Error("the field does not capture")
	}
	typeText(m, "hlsvrnwgdpmxq")
	if got := m.field.Value(); got != "hlsvrnwgdpmxq" {
		t.Errorf("field %q; want the global letters typed into it", got)
	}
	press(m, "ctrl+u")
	send(m, tea.PasteMsg{Content: goodJoin})
	press(m, "enter")
	if !m.Capturing() {
		t.Error("the confirmation does not capture")
	}
	_, _ = m.Update(tuitest.Key("y"))
	if m.Capturing() {
		t.Error("captures while enrolling")
	}
}

// TestRefresh: the status is read on activation, on refresh and every
// few seconds while shown.
func TestRefresh(t *testing.T) {
	f := &fake{st: &Status{}}
	m := newModel(t, term.Plain, f, true)
	send(m, common.ActivateMsg{})
	f.mu.Lock()
	f.st = connected()
	f.mu.Unlock()
	for range reloadEvery - 1 {
		send(m, common.TickMsg{Now: now})
	}
	if m.st.Enrolled {
		t.Fatal("read again before the period")
	}
	send(m, common.TickMsg{Now: now})
	if !m.st.Enrolled {
		t.Error("not read again after the period")
	}
	f.mu.Lock()
	f.st = revoked()
	f.mu.Unlock()
	send(m, common.RefreshMsg{})
	if m.st.Alert == "" {
		t.Error("not read again on refresh")
	}
}

// TestKeysAvoidReserved: no key of the screen, in any step, is a global
// letter.
func TestKeysAvoidReserved(t *testing.T) {
	m := newModel(t, term.Plain, &fake{}, true)
	for _, col := range m.FullHelp() {
		for _, b := range col {
			for _, k := range b.Keys() {
				if len(k) == 1 && strings.Contains(keys.Reserved, k) {
					t.Errorf("key %q (%s) is a global letter", k, b.Help().Desc)
				}
			}
		}
	}
}
