package netcfg

// The simulated host the planner walks: the live state, changed step by
// step as the plan would change it, so that each step is planned against
// what the steps before it leave.

import (
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"
)

// sim is the state as the steps planned so far will leave it.
type sim struct {
	links  map[string]*Link
	routes []Route
}

func newSim(st *State) *sim {
	s := &sim{links: map[string]*Link{}}
	if st == nil {
		return s
	}
	for _, l := range st.Links {
		l.Addresses = slices.Clone(l.Addresses)
		s.links[l.Name] = &l
	}
	s.routes = slices.Clone(st.Routes)
	return s
}

func (s *sim) hasAddr(link string, a netip.Prefix) bool {
	l := s.links[link]
	return l != nil && slices.Contains(l.Addresses, a)
}

// movable lists the routes through link that move with its addresses:
// those the kernel did not derive from an address (proto kernel) or learn
// from a router advertisement (proto ra), which it recreates itself.
func (s *sim) movable(link string) []Route {
	var out []Route
	for _, r := range s.routes {
		if r.Link == link && isMovable(r) {
			out = append(out, r)
		}
	}
	return out
}

func isMovable(r Route) bool {
	return r.Protocol != unix.RTPROT_KERNEL && r.Protocol != unix.RTPROT_RA
}

func (s *sim) carriesDefault(link string) bool {
	for _, r := range s.routes {
		if r.IsDefault() && (r.Link == link || slices.Contains(r.Multipath, link)) {
			return true
		}
	}
	return false
}

// snapshot is what recreating a deleted link needs.
type snapshot struct {
	Link
	ports    []string
	routes   []Route
	children []snapshot // VLANs on it, which the kernel deletes with it
}

func (s *sim) snapshot(name string) snapshot {
	snap := snapshot{Link: *s.links[name], routes: s.movable(name)}
	snap.Addresses = slices.Clone(snap.Addresses)
	for _, l := range s.sortedLinks() {
		if l.Master == name {
			snap.ports = append(snap.ports, l.Name)
		}
		if l.Type == "vlan" && l.Parent == name {
			snap.children = append(snap.children, s.snapshot(l.Name))
		}
	}
	return snap
}

func (s *sim) sortedLinks() []*Link {
	ls := make([]*Link, 0, len(s.links))
	for _, l := range s.links {
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b *Link) int { return a.Index - b.Index })
	return ls
}

// remove drops a deleted link, the VLANs on it and the routes through
// them, and frees its ports.
func (s *sim) remove(name string) {
	delete(s.links, name)
	s.routes = slices.DeleteFunc(s.routes, func(r Route) bool { return r.Link == name })
	for _, l := range s.sortedLinks() {
		if l.Master == name {
			l.Master = ""
		}
		if l.Type == "vlan" && l.Parent == name {
			s.remove(l.Name)
		}
	}
}

func unspecified(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

func (s *sim) hasDefault(gw netip.Addr, link string) bool {
	for _, r := range s.routes {
		if r.IsDefault() && r.Gateway == gw && r.Link == link {
			return true
		}
	}
	return false
}

// defaultRoute is the index of the default route of a family and metric,
// the one a route replace would overwrite, or -1.
func (s *sim) defaultRoute(v4 bool, metric int) int {
	for i, r := range s.routes {
		if r.IsDefault() && r.Dst.Addr().Is4() == v4 && r.Metric == metric && r.Link != "" {
			return i
		}
	}
	return -1
}
