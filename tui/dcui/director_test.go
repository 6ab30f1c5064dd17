package dcui

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/tuitest"
)

// TestDirectorEnrol enrols a host that is not enrolled from the Director
// screen in the frame, at 80x24 in both tiers: m, e, the join string
// typed (letters that are global keys included: the field takes them),
// enter, y. No frame, the CLI line and the legends included, shows the
// secret, nor any 8 characters of it in a row.
func TestDirectorEnrol(t *testing.T) {
	const secret = "q8w7e6r5t4y3u2i1o0p9a8s7d6f5g4h3"
	join := "vcj1:k7m2p9q4." + secret + "@director.example.org:9443#sha256:3a5f9c017e44b2d80c61af9325e87b4d10c29e58f63ba711d4826e0fb95ac327"
	pieces := []string{secret}
	for i := 0; i+8 <= len(secret); i++ {
		pieces = append(pieces, secret[i:i+8])
	}
	for _, tier := range tuitest.GoldenTiers {
		t.Run(tier.String(), func(t *testing.T) {
			agent := &fakeDirector{}
			r := newRigAgent(t, tier, statusSources(), agent)
			frames := 0
			check := func(step string) string {
				t.Helper()
				out := r.m.Render()
				frames++
				text := ansi.Strip(out)
				for _, p := range pieces {
					if strings.Contains(text, p) {
						t.Fatalf("%s: the frame shows %q of the secret:\n%s", step, p, text)
					}
				}
				return out
			}
			r.press("l")
			r.typeText("alice")
			r.press("tab")
			r.typeText("s3cret")
			r.press("enter", "m")
			golden := func(name string, out string, wants ...string) {
				t.Run(name, func(t *testing.T) {
					text := ansi.Strip(out)
					for _, w := range wants {
						if !strings.Contains(text, w) {
							t.Errorf("screen lacks %q:\n%s", w, text)
						}
					}
					tuitest.RequireGolden(t, tier, out, 80, 24)
				})
			}
			golden("01-not-enrolled", check("opened"), "[m Director]", "not enrolled", "e/enter enrol")
			r.press("e")
			for _, c := range join {
				r.press(string(c))
				check("typing")
			}
			golden("02-paste", check("typed"), "ENROL THIS HOST", "Join string", "enter check join string", "CLI: virt agent enroll --join-file FILE")
			r.press("enter")
			golden("03-confirm", check("submitted"), "director.example.org:9443", "k7m2p9q4", "Check this pin", "y enrol")
			r.press("y")
			golden("04-enrolled", check("enrolled"), "[PASS] enrolled with director.example.org:9443", "systemctl enable --now virtcon-agent")
			if len(agent.joins) != 1 || agent.joins[0].Format() != join {
				t.Errorf("enrolments %v; want one, with the typed join string", agent.joins)
			}
			// a bracketed paste lands in the field too
			r.press("m")
			agent.mu.Lock()
			agent.st = nil
			agent.mu.Unlock()
			r.press("r", "e")
			_, cmd := r.m.Update(tea.PasteMsg{Content: join + "\n"})
			r.drain(cmd)
			check("pasted")
			r.press("esc")
			check("cancelled")
			if frames < len(join) {
				t.Errorf("%d frames checked; want one per key at least", frames)
			}
		})
	}
}
