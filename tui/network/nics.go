package network

import (
	"fmt"
	"slices"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/styles"
)

// nicPicker picks the NIC for "reset the management network to DHCP".
type nicPicker struct {
	*shared
	size
	nics []string // nil until listed
	sel  int
}

var _ part = (*nicPicker)(nil)

// Capturing: the picker takes every key.
func (p *nicPicker) Capturing() bool { return true }

// CLI is the reset of the selected NIC.
func (p *nicPicker) CLI() string {
	nic := "IFACE"
	if p.sel < len(p.nics) {
		nic = p.nics[p.sel]
	}
	return "virt net reset-dhcp " + nic + tryFlag()
}

// ShortHelp is the picker's legend.
func (p *nicPicker) ShortHelp() []key.Binding {
	k := p.keys
	return []key.Binding{k.Up, k.Down, k.Pick, k.Cancel}
}

// listed shows the NICs, the management interface selected.
func (p *nicPicker) listed(nics []string) {
	p.nics, p.sel = nics, 0
	if cur := p.mgmtInterface(); cur != "" {
		if i := slices.Index(p.nics, cur); i >= 0 {
			p.sel = i
		}
	}
}

// Update answers the picker: enter reviews the reset of the selected NIC.
func (p *nicPicker) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	k := p.keys
	switch {
	case msg.String() == "esc":
		return toOverview{}, nil
	case key.Matches(msg, k.Up):
		p.sel = max(p.sel-1, 0)
	case key.Matches(msg, k.Down):
		p.sel = min(p.sel+1, max(len(p.nics)-1, 0))
	case msg.String() == "enter":
		if p.sel >= len(p.nics) {
			return nil, nil
		}
		nic := p.nics[p.sel]
		base, note := p.desired, ""
		if p.fallback != nil {
			// the desired file does not load: start from what
			// `virt net reset-dhcp` would, and say so
			base, note = p.fallback, p.fallbackWhy
		}
		next, err := netcfg.ResetManagementDHCP(base, nic, p.state)
		if err != nil {
			p.say(styles.Failure, "%v", err)
			return toOverview{}, nil
		}
		return toReview{base: base, next: next, what: "reset the management network to DHCP on " + nic,
			cli: "virt net reset-dhcp " + nic + tryFlag(), note: note}, nil
	}
	return nil, nil
}

// Lines draws the picker.
func (p *nicPicker) Lines() []string {
	s := p.c.Styles
	lines := []string{s.Title.Render("Reset the management network to DHCP"), "",
		"Pick the NIC that gets the host's address by DHCP. Bridges and VM networks",
		"stay; the static address, gateway and VLAN go. The change is on trial.", ""}
	if p.nics == nil {
		return append(lines, s.Muted.Render("  listing NICs"+p.dots()))
	}
	if len(p.nics) == 0 {
		return append(lines, "  "+s.Badgef(styles.Warning)+" no physical NICs found", "", s.Muted.Render("esc goes back"))
	}
	for i, n := range p.nics {
		mark := "  "
		if i == p.sel {
			mark = "> "
		}
		info := ""
		if l := p.state.Link(n); l != nil {
			info = "down"
			if l.Up {
				info = "up"
			}
			for _, a := range l.Addresses {
				info += "  " + a.String()
			}
			if l.Master != "" {
				info += "  (port of " + l.Master + ")"
			}
		}
		if n == p.mgmtInterface() {
			info += "  (management now)"
		}
		l := p.clean(fmt.Sprintf("%s%-12s %s", mark, n, info))
		if i == p.sel {
			l = s.Selected.Render(l)
		}
		lines = append(lines, l)
	}
	return lines
}
