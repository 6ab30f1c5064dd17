package netcfg

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/revert"
)

// Step is one change to the host. Its undo restores what its do changed;
// a step whose do fails halfway undoes its own part before returning.
type Step struct {
	Desc string
	do   func(*handle) error
	undo func(*handle) error
	// risk is set when the step may remove the host's default route:
	// Apply refuses it unless the default-route rule is relaxed.
	risk *FieldError
}

func (s Step) String() string { return s.Desc }

// op is one netlink call and its inverse; a Step is a sequence of ops.
type op struct {
	do, undo func(*handle) error
}

func newStep(desc string, ops ...op) Step {
	return Step{
		Desc: desc,
		do: func(h *handle) error {
			r := revert.New()
			// Best effort: the step's own error is what the caller needs.
			defer func() { _ = r.Fail() }()
			for _, o := range ops {
				if err := o.do(h); err != nil {
					return err
				}
				r.Add(func() error { return o.undo(h) })
			}
			r.Success()
			return nil
		},
		undo: func(h *handle) error {
			var errs []error
			for _, o := range slices.Backward(ops) {
				if err := o.undo(h); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
}

// Plan lists the steps that take the host from live to cfg, in order:
// removal of what prev (the previously applied configuration, nil if none)
// had and cfg no longer has, then bridges, VLANs, MTUs, ports (moving an
// uplink's addresses and routes to its bridge), addresses, links up, and
// the management default route. It changes only what differs, so a plan
// against the state an apply left is empty; and it deletes only links and
// addresses prev declared, never anything virtcon did not create.
//
// Moved addresses become permanent on the bridge (a DHCP or SLAAC
// lifetime is not carried over); routes the kernel derives (proto kernel)
// or learns from router advertisements are left for it to recreate.
//
// Management DHCP is not a plan step: Plan brings the interface up and
// Apply then ensures the DHCP client that addresses it.
func Plan(cfg *Config, live *State, prev *Config) []Step {
	if prev == nil {
		prev = &Config{}
	}
	p := &planner{cfg: cfg, prev: prev, s: newSim(live)}
	p.removals()
	p.bridges()
	p.vlans()
	p.mtus()
	p.ports()
	p.addresses()
	p.ups()
	p.gateway()
	return p.steps
}

type planner struct {
	cfg, prev *Config
	s         *sim
	steps     []Step
}

func (p *planner) add(s Step) { p.steps = append(p.steps, s) }

func (p *planner) removals() {
	want := map[string]bool{}
	for _, b := range p.cfg.Bridges {
		want[b.Name] = true
	}
	for _, v := range p.cfg.allVLANs() {
		want[v.Name] = true
	}
	// A link cfg still builds on stays, whoever made it.
	for _, n := range p.cfg.Links() {
		want[n] = true
	}
	for _, v := range p.prev.allVLANs() {
		if l := p.s.links[v.Name]; !want[v.Name] && l != nil && l.Type == "vlan" {
			p.deleteLink(v.Name, "VLAN")
		}
	}
	for _, b := range p.prev.Bridges {
		if l := p.s.links[b.Name]; !want[b.Name] && l != nil && l.Type == "bridge" {
			p.deleteLink(b.Name, "bridge")
		}
	}

	// Ports prev enslaved to a bridge that cfg keeps but without them.
	portOf := map[string]string{}
	for _, b := range p.cfg.Bridges {
		for _, port := range b.Ports {
			portOf[port] = b.Name
		}
	}
	for _, b := range p.prev.Bridges {
		for _, port := range b.Ports {
			if l := p.s.links[port]; l != nil && l.Master == b.Name && portOf[port] == "" {
				p.add(newStep(fmt.Sprintf("release %s from bridge %s", port, b.Name), op{
					do:   func(h *handle) error { return setMaster(h, port, "") },
					undo: func(h *handle) error { return setMaster(h, port, b.Name) },
				}))
				l.Master = ""
			}
		}
	}

	// Addresses prev declared that cfg no longer does. Before any add:
	// removing a primary address takes the secondaries of its subnet
	// with it (unless promote_secondaries is set).
	order, had := p.prev.linkAddrs()
	_, keep := p.cfg.linkAddrs()
	for _, link := range order {
		for _, a := range had[link] {
			if slices.Contains(keep[link], a) || !p.s.hasAddr(link, a) {
				continue
			}
			// The kernel drops the routes that need the address (its
			// gateway's subnet, or it as source): the undo puts them back.
			needs := func(r Route) bool {
				return r.Link == link && isMovable(r) &&
					((r.Gateway.IsValid() && a.Masked().Contains(r.Gateway)) || r.Src == a.Addr())
			}
			var deps []Route
			for _, r := range p.s.routes {
				if needs(r) {
					deps = append(deps, r)
				}
			}
			st := newStep(fmt.Sprintf("remove address %s from %s", a, link), op{
				do: func(h *handle) error { return delAddr(h, link, a, false) },
				undo: func(h *handle) error {
					errs := []error{addAddr(h, link, a, true)}
					for _, r := range deps {
						errs = append(errs, replaceRoute(h, r, link))
					}
					return errors.Join(errs...)
				},
			})
			for _, r := range deps {
				if r.IsDefault() {
					st.risk = riskErr("addresses", a.String(), fmt.Sprintf("removing it from %s (applied before, gone from this file) would remove the host's default route (%s)", link, r))
				}
			}
			p.add(st)
			l := p.s.links[link]
			l.Addresses = slices.DeleteFunc(l.Addresses, func(x netip.Prefix) bool { return x == a })
			p.s.routes = slices.DeleteFunc(p.s.routes, needs)
		}
	}
}

func (p *planner) deleteLink(name, what string) {
	snap := p.s.snapshot(name)
	st := newStep(fmt.Sprintf("delete %s %s (applied before, gone from this file)", what, name), op{
		do:   func(h *handle) error { return delLink(h, name) },
		undo: func(h *handle) error { return recreate(h, snap) },
	})
	carriers := []string{name}
	for _, c := range snap.children {
		carriers = append(carriers, c.Name)
	}
	for _, c := range carriers {
		if p.s.carriesDefault(c) {
			st.risk = riskErr(strings.ToLower(what)+"s", name, fmt.Sprintf("deleting it would remove the host's default route (through %s)", c))
		}
	}
	p.add(st)
	p.s.remove(name)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (p *planner) bridges() {
	for _, b := range p.cfg.Bridges {
		l := p.s.links[b.Name]
		if l == nil {
			desc := fmt.Sprintf("create bridge %s (stp %s, vlan filtering %s", b.Name, onOff(b.STP), onOff(b.VLANFiltering))
			if b.MTU != 0 {
				desc += fmt.Sprintf(", mtu %d", b.MTU)
			}
			p.add(newStep(desc+")", op{
				do:   func(h *handle) error { return createBridge(h, b.Name, b.MTU, b.STP, b.VLANFiltering) },
				undo: func(h *handle) error { return delLink(h, b.Name) },
			}))
			mtu := b.MTU
			if mtu == 0 {
				mtu = 1500
			}
			p.s.links[b.Name] = &Link{Name: b.Name, Type: "bridge", MTU: mtu, STP: b.STP, VLANFiltering: b.VLANFiltering}
			continue
		}
		if l.STP != b.STP {
			p.add(newStep(fmt.Sprintf("turn STP %s on bridge %s", onOff(b.STP), b.Name), op{
				do:   func(h *handle) error { return h.setBridgeSTP(b.Name, b.STP) },
				undo: func(h *handle) error { return h.setBridgeSTP(b.Name, !b.STP) },
			}))
			l.STP = b.STP
		}
		if l.VLANFiltering != b.VLANFiltering {
			p.add(newStep(fmt.Sprintf("turn VLAN filtering %s on bridge %s", onOff(b.VLANFiltering), b.Name), op{
				do:   func(h *handle) error { return setVLANFiltering(h, b.Name, b.VLANFiltering) },
				undo: func(h *handle) error { return setVLANFiltering(h, b.Name, !b.VLANFiltering) },
			}))
			l.VLANFiltering = b.VLANFiltering
		}
	}
}

func (p *planner) vlans() {
	for _, v := range p.cfg.allVLANs() {
		l := p.s.links[v.Name]
		desc := fmt.Sprintf("VLAN %s on %s (id %d", v.Name, v.Link, v.ID)
		if v.MTU != 0 {
			desc += fmt.Sprintf(", mtu %d", v.MTU)
		}
		desc += ")"
		create := op{
			do:   func(h *handle) error { return createVLAN(h, v.Name, v.Link, v.ID, v.MTU) },
			undo: func(h *handle) error { return delLink(h, v.Name) },
		}
		switch {
		case l == nil:
			p.add(newStep("create "+desc, create))
		case l.Type == "vlan" && (l.Parent != v.Link || l.VLANID != v.ID):
			// The kernel cannot change a VLAN's parent or id.
			snap := p.s.snapshot(v.Name)
			p.add(newStep(fmt.Sprintf("recreate %s (was on %s, id %d)", desc, l.Parent, l.VLANID), op{
				do:   func(h *handle) error { return delLink(h, v.Name) },
				undo: func(h *handle) error { return recreate(h, snap) },
			}, create))
			p.s.remove(v.Name)
		default:
			continue
		}
		mtu := v.MTU
		if parent := p.s.links[v.Link]; mtu == 0 && parent != nil {
			mtu = parent.MTU
		}
		p.s.links[v.Name] = &Link{Name: v.Name, Type: "vlan", MTU: mtu, VLANID: v.ID, Parent: v.Link}
	}
}

func (p *planner) mtus() {
	var names []string
	for _, b := range p.cfg.Bridges {
		names = append(names, b.Name)
	}
	if ml := p.cfg.mgmtLink(); ml != "" {
		names = append(names, ml)
	}
	// VLANs after the links under them: a VLAN's MTU cannot exceed its
	// parent's.
	for _, v := range p.cfg.allVLANs() {
		names = append(names, v.Name)
	}
	seen := map[string]bool{}
	for _, name := range names {
		want := p.cfg.linkMTU(name, true)
		l := p.s.links[name]
		if seen[name] || want == 0 || l == nil || l.MTU == want {
			continue
		}
		seen[name] = true
		was := l.MTU
		p.add(newStep(fmt.Sprintf("set MTU of %s to %d (was %d)", name, want, was), op{
			do:   func(h *handle) error { return setMTU(h, name, want) },
			undo: func(h *handle) error { return setMTU(h, name, was) },
		}))
		l.MTU = want
	}
}

func (p *planner) ports() {
	for _, b := range p.cfg.Bridges {
		for _, port := range b.Ports {
			pl := p.s.links[port]
			if pl != nil && pl.Master == b.Name {
				continue
			}
			br := p.s.links[b.Name]
			oldMaster := ""
			var addrs []netip.Prefix
			var routes []Route
			if pl != nil {
				oldMaster = pl.Master
				addrs = slices.Clone(pl.Addresses)
				routes = p.s.movable(port)
			}
			ops := []op{}
			desc := fmt.Sprintf("enslave %s to bridge %s", port, b.Name)
			move := len(addrs) > 0 || len(routes) > 0
			if move {
				// The addresses and routes must land on a bridge that is up
				// (a route via a down link is refused), in this same step,
				// so that the host is unreachable for microseconds only.
				var what []string
				for _, a := range addrs {
					what = append(what, a.String())
				}
				for _, r := range routes {
					what = append(what, "route "+r.String())
				}
				desc += fmt.Sprintf(", moving %s to %s", strings.Join(what, ", "), b.Name)
				if br != nil && !br.Up {
					ops = append(ops, upOp(b.Name))
					br.Up = true
				}
				if !pl.Up {
					ops = append(ops, upOp(port))
					pl.Up = true
				}
			}
			// Off the port first, then onto the bridge: undone in reverse,
			// the port is released before its addresses come back.
			for _, r := range routes {
				ops = append(ops, op{
					do:   func(h *handle) error { return delRoute(h, r, port) },
					undo: func(h *handle) error { return replaceRoute(h, r, port) },
				})
			}
			for _, a := range addrs {
				ops = append(ops, op{
					do:   func(h *handle) error { return delAddr(h, port, a, false) },
					undo: func(h *handle) error { return addAddr(h, port, a, true) },
				})
			}
			ops = append(ops, op{
				do: func(h *handle) error {
					if err := setMaster(h, port, b.Name); err != nil {
						return err
					}
					// Enslaving lowers a bridge's MTU to its smallest
					// port's unless the MTU was set explicitly: set it.
					if b.MTU != 0 {
						return ensureMTU(h, b.Name, b.MTU)
					}
					return nil
				},
				undo: func(h *handle) error { return setMaster(h, port, oldMaster) },
			})
			for _, a := range addrs {
				if p.s.hasAddr(b.Name, a) {
					continue
				}
				ops = append(ops, op{
					do:   func(h *handle) error { return addAddr(h, b.Name, a, false) },
					undo: func(h *handle) error { return delAddr(h, b.Name, a, true) },
				})
				if br != nil {
					br.Addresses = append(br.Addresses, a)
				}
			}
			for _, r := range routes {
				ops = append(ops, op{
					do:   func(h *handle) error { return replaceRoute(h, r, b.Name) },
					undo: func(h *handle) error { return delRoute(h, r, b.Name) },
				})
			}
			p.add(newStep(desc, ops...))
			if pl != nil {
				pl.Master = b.Name
				pl.Addresses = nil
				for i, r := range p.s.routes {
					if r.Link == port && isMovable(r) {
						p.s.routes[i].Link = b.Name
					}
				}
			}
		}
	}
}

func (p *planner) addresses() {
	order, addrs := p.cfg.linkAddrs()
	for _, link := range order {
		for _, a := range addrs[link] {
			if p.s.hasAddr(link, a) {
				continue
			}
			p.add(newStep(fmt.Sprintf("add address %s to %s", a, link), op{
				do:   func(h *handle) error { return addAddr(h, link, a, false) },
				undo: func(h *handle) error { return delAddr(h, link, a, true) },
			}))
			if l := p.s.links[link]; l != nil {
				l.Addresses = append(l.Addresses, a)
			}
		}
	}
}

func upOp(name string) op {
	return op{
		do:   func(h *handle) error { return setUp(h, name, true) },
		undo: func(h *handle) error { return setUp(h, name, false) },
	}
}

func (p *planner) ups() {
	// Lower links first: a VLAN cannot come up on a down parent.
	created := map[string]bool{}
	var lower, upper []string
	for _, b := range p.cfg.Bridges {
		created[b.Name] = true
		upper = append(upper, b.Name)
	}
	for _, v := range p.cfg.allVLANs() {
		created[v.Name] = true
		upper = append(upper, v.Name)
	}
	for _, b := range p.cfg.Bridges {
		lower = append(lower, b.Ports...)
	}
	for _, v := range p.cfg.allVLANs() {
		lower = append(lower, v.Link)
	}
	if m := p.cfg.Management; m != nil {
		lower = append(lower, m.Interface)
		upper = append(upper, p.cfg.mgmtLink())
	}
	lower = slices.DeleteFunc(lower, func(n string) bool { return created[n] })
	seen := map[string]bool{}
	for _, name := range append(lower, upper...) {
		if seen[name] || name == "" {
			continue
		}
		seen[name] = true
		l := p.s.links[name]
		if l != nil && l.Up {
			continue
		}
		p.add(newStep("bring "+name+" up", upOp(name)))
		if l != nil {
			l.Up = true
		}
	}
}

func (p *planner) gateway() {
	gw, link := p.cfg.gateway()
	if gw.IsValid() && !p.s.hasDefault(gw, link) {
		want := Route{Dst: netip.PrefixFrom(unspecified(gw), 0), Gateway: gw, Link: link, Protocol: unix.RTPROT_STATIC}
		var old *Route
		oldAt := p.s.defaultRoute(gw.Is4(), 0)
		if oldAt >= 0 {
			o := p.s.routes[oldAt]
			old = &o
		}
		desc := fmt.Sprintf("set default route via %s dev %s", gw, link)
		undo := func(h *handle) error { return delRoute(h, want, link) }
		if old != nil {
			desc += " (replacing " + old.String() + ")"
			o := *old
			undo = func(h *handle) error {
				if err := delRoute(h, want, link); err != nil {
					return err
				}
				return replaceRoute(h, o, o.Link)
			}
		}
		st := newStep(desc, op{
			do:   func(h *handle) error { return replaceRoute(h, want, link) },
			undo: undo,
		})
		// A metric-0 default route wins over any other: with one in
		// place already, this changes where the host's traffic goes.
		for _, r := range p.s.routes {
			if r.IsDefault() && r.Dst.Addr().Is4() == gw.Is4() {
				st.risk = riskErr("management.gateway", gw.String(), fmt.Sprintf("would replace the host's default route (%s)", r))
				break
			}
		}
		p.add(st)
		if oldAt >= 0 {
			p.s.routes = slices.Delete(p.s.routes, oldAt, oldAt+1)
		}
		p.s.routes = append(p.s.routes, want)
	}
	// The default route prev set, when cfg sets none of that family.
	pgw, plink := p.prev.gateway()
	if !pgw.IsValid() || (gw.IsValid() && gw.Is4() == pgw.Is4()) {
		return
	}
	for _, r := range p.s.routes {
		if r.IsDefault() && r.Gateway == pgw && r.Link == plink && r.Metric == 0 {
			st := newStep(fmt.Sprintf("remove default route via %s dev %s (applied before, gone from this file)", pgw, plink), op{
				do:   func(h *handle) error { return delRoute(h, r, plink) },
				undo: func(h *handle) error { return replaceRoute(h, r, plink) },
			})
			st.risk = riskErr("management.gateway", "", fmt.Sprintf("removing the default route via %s would leave the host without one", pgw))
			p.add(st)
			break
		}
	}
}
