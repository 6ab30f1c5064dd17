package network

import (
	"fmt"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/styles"
)

// overview is the screen's main mode: the management interface and the
// bridges as network.yaml wants them beside what the host has, the VM
// networks, the change on trial; the keys that open the forms and
// dialogs.
type overview struct {
	*shared
	size
	sel int // selected bridge
}

var _ part = (*overview)(nil)

func newOverview(s *shared) *overview { return &overview{shared: s} }

// Capturing: the overview leaves letters to the global map.
func (o *overview) Capturing() bool { return false }

// CLI shows the file and the bridges.
func (o *overview) CLI() string { return "virt net show   (bridges: virt net bridge list)" }

// ShortHelp is the legend.
func (o *overview) ShortHelp() []key.Binding { return o.overviewHelp() }

// overviewHelp is the overview's legend; while a change is on trial
// editing waits for it to end, so it offers keep and roll back instead.
func (s *shared) overviewHelp() []key.Binding {
	k := s.keys
	if s.pending != nil {
		return []key.Binding{k.Confirm, k.Rollback, k.Test, k.Up, k.Down}
	}
	return k.ShortHelp()
}

// selected is the selected bridge, nil when there is none.
func (o *overview) selected() *netcfg.Bridge {
	if o.desired == nil || o.sel < 0 || o.sel >= len(o.desired.Bridges) {
		return nil
	}
	return &o.desired.Bridges[o.sel]
}

// clamp keeps the selection on a bridge of the file after a reload.
func (o *overview) clamp() {
	if o.desired != nil && o.sel >= len(o.desired.Bridges) {
		o.sel = max(len(o.desired.Bridges)-1, 0)
	}
}

// Update answers the overview's keys.
func (o *overview) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	k := o.keys
	switch {
	case key.Matches(msg, k.Up):
		o.sel = max(o.sel-1, 0)
	case key.Matches(msg, k.Down):
		if o.desired != nil {
			o.sel = min(o.sel+1, max(len(o.desired.Bridges)-1, 0))
		}
	case key.Matches(msg, k.Test):
		if o.desired == nil {
			o.say(styles.Warning, "still loading")
			return nil, nil
		}
		return runTest{fresh: true}, nil
	case key.Matches(msg, k.Confirm, k.Rollback):
		if o.pending == nil {
			o.say(styles.Info, "no change on trial")
			return nil, nil
		}
		if !o.mayWrite() {
			return nil, nil
		}
		if key.Matches(msg, k.Confirm) {
			return keepTrial{}, nil
		}
		return rollBack{}, nil
	case key.Matches(msg, k.Edit, k.Add, k.Open, k.Delete, k.Reset):
		return o.change(msg), nil
	}
	return nil, nil
}

// change answers the keys that change the file: each opens a form or a
// dialog, when the console may write, the file is loaded (or, for the
// DHCP reset, its fallback is) and no change is on trial.
func (o *overview) change(msg tea.KeyPressMsg) intent {
	k := o.keys
	if !o.mayWrite() {
		return nil
	}
	if o.desired == nil && !(key.Matches(msg, k.Reset) && o.fallback != nil) {
		o.say(styles.Warning, "still loading")
		return nil
	}
	if o.pending != nil {
		o.say(styles.Warning, "a change is on trial: keep it (c) or roll it back (b) first")
		return nil
	}
	o.msg = ""
	switch {
	case key.Matches(msg, k.Edit):
		return openForm{kind: formManagement}
	case key.Matches(msg, k.Add):
		return openForm{kind: formAddBridge, bridge: -1}
	case key.Matches(msg, k.Open):
		if o.selected() == nil {
			o.say(styles.Info, "no bridge to edit: a adds one")
			return nil
		}
		return openForm{kind: formEditBridge, bridge: o.sel}
	case key.Matches(msg, k.Delete):
		b := o.selected()
		if b == nil {
			o.say(styles.Info, "no bridge to delete")
			return nil
		}
		return openDelete{name: b.Name}
	case key.Matches(msg, k.Reset):
		return openNICs{}
	}
	return nil
}

const col1, col2 = 14, 30

func row(label, desired, live string) string {
	l := "  " + padRight(label, col1) + desired
	if live != "" {
		l = padRight(l, 2+col1+col2) + " " + live
	}
	return l
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Lines draws the overview.
func (o *overview) Lines() []string {
	s := o.c.Styles
	if !o.loaded {
		return []string{s.Muted.Render("loading" + o.dots())}
	}
	var lines []string
	if o.loadErr != nil {
		lines = append(lines, s.Badgef(styles.Failure)+" "+o.clean(o.loadErr.Error()))
	}
	lines = append(lines, padRight(s.Section.Render("MANAGEMENT"), 2+col1)+
		padRight(s.Muted.Render("wanted (network.yaml)"), col2)+" "+s.Muted.Render("live"))
	lines = append(lines, o.mgmtRows()...)
	lines = append(lines, o.bridgeHeader())
	lines = append(lines, o.bridgeRows()...)
	lines = append(lines, s.Section.Render("NETWORKS")+"  "+o.networksLine())
	lines = append(lines, s.Section.Render("TRIAL")+"     "+o.trialLine())
	return append(lines, o.messageLines(o.w, o.h-len(lines))...)
}

func (o *overview) mgmtRows() []string {
	cfg := o.desired
	if cfg == nil || cfg.Management == nil {
		return []string{"  " + o.c.Styles.Badgef(styles.Warning) + " no management interface in the file: e sets one, z resets to DHCP"}
	}
	mg := cfg.Management
	link := mg.Interface
	if mg.VLAN != 0 {
		link = fmt.Sprintf("%s.%d", mg.Interface, mg.VLAN)
	}
	var ll *netcfg.Link
	if o.state != nil {
		ll = o.state.Link(link)
	}
	liveLink, liveAddrs, liveGW, liveMTU := "missing", "-", "-", "-"
	if ll != nil {
		liveLink = "down"
		if ll.Up {
			liveLink = "up"
		}
		var as []string
		for _, a := range ll.Addresses {
			as = append(as, a.String())
		}
		liveAddrs = orDash(strings.Join(as, ", "))
		liveMTU = strconv.Itoa(ll.MTU)
		for _, r := range o.state.Routes {
			if r.IsDefault() && r.Link == link && r.Gateway.IsValid() {
				liveGW = "default via " + r.Gateway.String()
				break
			}
		}
	}
	mode, addrs, gw := "static", orDash(strings.Join(mg.Addresses, ", ")), orDash(mg.Gateway)
	if mg.DHCP {
		mode, addrs, gw = "dhcp", "(from DHCP)", "(from DHCP)"
	}
	vlan := "untagged"
	if mg.VLAN != 0 {
		vlan = "VLAN " + strconv.Itoa(mg.VLAN)
	}
	mtu := "default"
	if mg.MTU != 0 {
		mtu = strconv.Itoa(mg.MTU)
	}
	rows := []string{
		row("interface", link, liveLink),
		row("mode", mode, ""),
		row("addresses", addrs, liveAddrs),
		row("gateway", gw, liveGW),
		row("vlan / mtu", vlan+" / "+mtu, "mtu "+liveMTU),
		row("dns", orDash(strings.Join(cfg.DNS.Servers, ", ")), ""),
		row("hostname", orDash(cfg.Hostname), ""),
	}
	for i, r := range rows {
		rows[i] = o.clean(r)
	}
	return rows
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// bridgeRow lays out a bridge line: mark, name, ports, addresses, STP,
// VLAN filtering, live state.
const bridgeRow = "%s%-10s %-16s %-18s %-4s %-6s %s"

func (o *overview) bridgeHeader() string {
	s := o.c.Styles
	return padRight(s.Section.Render("BRIDGES"), 13) + s.Muted.Render(fmt.Sprintf("%-16s %-18s %-4s %-6s %s", "ports", "addresses", "stp", "vlanf", "live"))
}

func (o *overview) bridgeRows() []string {
	s := o.c.Styles
	if o.desired == nil || len(o.desired.Bridges) == 0 {
		return []string{"  " + s.Muted.Render("none in the file: a adds one")}
	}
	// keep the selection in view when the list is long
	const shown = 4
	start := 0
	if o.sel >= shown {
		start = o.sel - shown + 1
	}
	var lines []string
	for i, b := range o.desired.Bridges {
		if i < start || i >= start+shown {
			continue
		}
		mark := "  "
		if i == o.sel {
			mark = "> "
		}
		live := "missing"
		if l := o.state.Link(b.Name); l != nil {
			live = "down"
			if l.Up {
				live = "up"
			}
		}
		l := o.clean(fmt.Sprintf(bridgeRow, mark, b.Name, orDash(strings.Join(b.Ports, ",")), orDash(strings.Join(b.Addresses, ",")),
			onOff(b.STP), onOff(b.VLANFiltering), live))
		if i == o.sel {
			l = s.Selected.Render(l)
		}
		lines = append(lines, l)
	}
	if n := len(o.desired.Bridges); n > shown {
		lines = append(lines, s.Muted.Render(fmt.Sprintf("  (%d-%d of %d, up/down)", start+1, min(start+shown, n), n)))
	}
	return lines
}

func (o *overview) networksLine() string {
	if o.desired == nil || len(o.desired.Networks) == 0 {
		return "none"
	}
	var parts []string
	for _, n := range o.desired.Networks {
		p := fmt.Sprintf("%s (%s on %s", n.Name, n.Type, n.Bridge)
		if n.Subnet != "" {
			p += " " + n.Subnet
		}
		parts = append(parts, p+")")
	}
	return o.clean(strings.Join(parts, ", "))
}

func (o *overview) trialLine() string {
	s := o.c.Styles
	if o.pending == nil {
		return "no change on trial"
	}
	return s.Badgef(styles.Warning) + " change on trial: rolls back in " + clock(o.pending.Remaining(o.c.Now())) + " (c keep, b roll back)"
}
