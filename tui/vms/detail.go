package vms

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/vm"
)

// detailLine is the position in the list and what the core says about the
// selected entry.
func (m *Model) detailLine() string {
	s := m.c.Styles
	e, ok := m.selected()
	if !ok {
		return ""
	}
	pos := fmt.Sprintf("%d/%d", m.cursor+1, len(m.entries))
	var notes []string
	if e.Message != "" {
		notes = append(notes, e.Message)
	}
	if e.AccelReason != "" {
		notes = append(notes, "accel: "+e.AccelReason)
	}
	if e.Autostart {
		notes = append(notes, autostartNote(e))
	}
	if len(notes) == 0 && actionable(e) {
		notes = append(notes, "enter: actions")
	}
	return s.Muted.Render(pos + "  " + m.clean(e.Name) + ": " + m.clean(strings.Join(notes, "; ")))
}

// footLines are the detail line and the message line under the table.
// For an UNREADABLE row what is wrong with its spec is what the operator
// needs: it is marked as a failure, the spec's error first, and, unless
// the screen has a message of its own, the spec file on the message line
// (where the list's error would say the same at greater length). No
// "enter: actions": nothing acts on it until the spec is repaired.
func (m *Model) footLines() []string {
	e, ok := m.selected()
	if !ok || e.Class != vm.ClassUnreadable {
		return []string{m.detailLine(), m.messageLine()}
	}
	s := m.c.Styles
	badge := s.Badgef(styles.Failure) + " "
	indent := strings.Repeat(" ", lipgloss.Width(badge))
	pos := fmt.Sprintf("%d/%d  ", m.cursor+1, len(m.entries))
	se := specErrorFor(m.loadErr, e.UID)
	if se == nil {
		// the core's message alone: wrapped over both lines
		text := pos + m.clean(label(e)) + ": " + m.clean(e.Message)
		if m.msg != "" {
			return []string{badge + text, m.msg}
		}
		first, _, _ := strings.Cut(ansi.Wrap(text, max(m.c.Width-len(indent), 20), "/"), "\n")
		rest, ok := strings.CutPrefix(text, first)
		if !ok {
			first, rest = text, ""
		}
		if rest = strings.TrimLeft(rest, " "); rest != "" {
			rest = indent + rest // Fit cuts it to the width
		}
		return []string{badge + first, rest}
	}
	name := ""
	if e.Name != "" {
		name = m.clean(e.Name) + ": "
	}
	detail := badge + pos + name + "spec unreadable: " + m.clean(se.Err.Error())
	if m.msg != "" {
		return []string{detail, m.msg}
	}
	return []string{detail, indent + m.clean(se.Path)}
}

// specErrorFor finds the error of uid's spec in the list's error (a
// join of one *vm.SpecError per spec that cannot be read).
func specErrorFor(err error, uid string) *vm.SpecError {
	if err == nil || uid == "" {
		return nil
	}
	var se *vm.SpecError
	if errors.As(err, &se) && se.UID == uid && se.Err != nil {
		return se
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if se := specErrorFor(e, uid); se != nil {
				return se
			}
		}
	}
	return nil
}

func (m *Model) messageLine() string {
	if m.msg != "" {
		return m.msg
	}
	if m.loadErr != nil && len(m.entries) > 0 {
		return m.c.Styles.Badgef(styles.Warning) + " " + m.clean(m.loadErr.Error())
	}
	return ""
}

// autostartNote is the detail line's word on a VM that autostarts.
func autostartNote(e vm.Entry) string {
	n := "autostart"
	if e.StartupOrder != 0 {
		n += fmt.Sprintf(" (order %d", e.StartupOrder)
		if e.StartupDelay != 0 {
			n += ", delay " + e.StartupDelay.String()
		}
		n += ")"
	} else if e.StartupDelay != 0 {
		n += " (delay " + e.StartupDelay.String() + ")"
	}
	return n
}

// snapState is the snapshots panel of one VM: its snapshots, newest
// last as the core lists them, and the highlighted one.
type snapState struct {
	key    string // the VM's entryKey
	e      vm.Entry
	list   []vm.Snapshot
	loaded bool
	err    error
	idx    int
}

// snapListMsg is the panel's list, read in the background.
type snapListMsg struct {
	key  string
	list []vm.Snapshot
	err  error
}

// openSnapshots opens e's snapshots panel and reads its list.
func (m *Model) openSnapshots(e vm.Entry) tea.Cmd {
	if _, ok := m.mgr.(Snapshotter); !ok {
		m.warn("snapshots are not available here")
		return nil
	}
	m.snaps = &snapState{key: entryKey(e), e: e}
	return m.loadSnaps()
}

func (m *Model) loadSnaps() tea.Cmd {
	sn, ok := m.mgr.(Snapshotter)
	if m.snaps == nil || !ok {
		return nil
	}
	k, ref, parent := m.snaps.key, m.snaps.e.UID, m.c.Ctx
	if ref == "" {
		ref = m.snaps.e.Name
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, listTimeout)
		defer cancel()
		list, err := sn.ListSnapshots(ctx, ref)
		return snapListMsg{key: k, list: list, err: err}
	}
}

// snapsLoaded takes the panel's list, if the panel is still that VM's.
func (m *Model) snapsLoaded(msg snapListMsg) {
	p := m.snaps
	if p == nil || p.key != msg.key {
		return
	}
	p.loaded, p.err = true, msg.err
	if msg.err != nil && m.c.Logger != nil {
		m.c.Logger.Warn("vms: list snapshots", "vm", p.e.Name, "err", msg.err)
	}
	if msg.err == nil {
		p.list = msg.list
	}
	p.idx = min(max(p.idx, 0), max(len(p.list)-1, 0))
}

// snapDone reloads the panel after one of its VM's operations ended.
func (m *Model) snapDone(k string) tea.Cmd {
	if m.snaps == nil || m.snaps.key != k {
		return nil
	}
	if e, ok := m.find(k); ok {
		m.snaps.e = e
	}
	return m.loadSnaps()
}

func (m *Model) snapsKey(msg tea.KeyPressMsg) tea.Cmd {
	p, k := m.snaps, m.keys
	// the VM as the list has it now (running or not decides the warning)
	if e, ok := m.find(p.key); ok {
		p.e = e
	}
	switch {
	case key.Matches(msg, k.Close):
		m.snaps = nil
	case key.Matches(msg, k.Up):
		p.idx = max(p.idx-1, 0)
	case key.Matches(msg, k.Down):
		p.idx = min(p.idx+1, max(len(p.list)-1, 0))
	case key.Matches(msg, k.SnapCreate):
		if !m.c.Session.CanWrite() {
			m.warn(m.c.Session.ReadOnlyReason())
			return nil
		}
		m.form = &formState{kind: formSnapshot, e: p.e}
	case key.Matches(msg, k.SnapRestore), key.Matches(msg, k.SnapDelete):
		if p.idx >= len(p.list) {
			return nil
		}
		if !m.c.Session.CanWrite() {
			m.warn(m.c.Session.ReadOnlyReason())
			return nil
		}
		sn := p.list[p.idx]
		a := actSnapRestore
		if key.Matches(msg, k.SnapDelete) {
			a = actSnapDelete
		}
		m.confirm = &confirmState{act: a, e: p.e, d: &day2{act: a, e: p.e, name: sn.Name, flag: sn.Memory}}
	}
	return nil
}

// snapsBox is the panel: the VM's snapshots with their date, memory
// state, whether they hold memory and whether they can be restored.
func (m *Model) snapsBox() []string {
	s, p := m.c.Styles, m.snaps
	lines := []string{s.Section.Render("Snapshots of "+m.clean(p.e.Name)) + " " + s.Muted.Render("("+p.e.Phase+")"), ""}
	const nameW = 22
	switch {
	case !p.loaded:
		lines = append(lines, s.Muted.Render("loading"+dots(s)))
	case p.err != nil:
		lines = append(lines, s.Badgef(styles.Failure)+" "+m.clean(p.err.Error()))
	case len(p.list) == 0:
		lines = append(lines, "No snapshots yet: c takes one.")
	default:
		// VMSTATE: the memory state each holds (its disk data has no size
		// of its own); STATE: whether virt recorded it whole (docs/vms.md)
		lines = append(lines, "  "+s.Section.Render(m.cell("NAME", nameW)+" "+m.cell("TAKEN", 16)+" "+m.cell("VMSTATE", 9)+" "+m.cell("MEMORY", 6)+" STATE"))
		rows := max(m.c.Height-12, 1)
		off := max(p.idx-rows+1, 0)
		for i := off; i < len(p.list) && i < off+rows; i++ {
			sn := p.list[i]
			mem, vmstate := "no", "-"
			if sn.Memory {
				mem = "yes"
			}
			if sn.VMStateBytes > 0 {
				vmstate = humanBytes(sn.VMStateBytes)
			}
			state := "ok"
			if sn.State != vm.SnapshotRecorded && sn.State != "" {
				state = strings.ToUpper(string(sn.State))
			}
			l := m.cell(m.clean(sn.Name), nameW) + " " + m.cell(sn.CreatedAt.Local().Format("2006-01-02 15:04"), 16) + " " +
				m.cell(vmstate, 9) + " " + m.cell(mem, 6) + " " + state
			if i == p.idx {
				lines = append(lines, s.Selected.Render("> "+l))
			} else {
				lines = append(lines, "  "+l)
			}
		}
		if p.idx < len(p.list) && p.list[p.idx].Why != "" {
			// why the highlighted one is not restored, wrapped to the box
			sn := p.list[p.idx]
			why := strings.ToUpper(string(sn.State)) + ": " + sn.Why + "; it is not restored (Del deletes it)."
			lines = append(lines, "")
			for _, l := range strings.Split(ansi.Wordwrap(m.clean(why), max(min(m.c.Width-8, 66), 20), ""), "\n") {
				lines = append(lines, s.Muted.Render(l))
			}
		}
	}
	return m.box(append(lines, "", s.Muted.Render("c take  enter restore  Del/D delete  esc close")))
}

// humanBytes is n in binary units, one decimal below 10.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), ""
	for _, x := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		u = x
		if v < unit {
			break
		}
	}
	if v < 10 {
		return fmt.Sprintf("%.1f %s", v, u)
	}
	return fmt.Sprintf("%.0f %s", v, u)
}
