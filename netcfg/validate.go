package netcfg

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// ValidateOptions relax the safety rules.
type ValidateOptions struct {
	// AllowDefaultRouteChange lets a bridge enslave the interface that
	// carries the host's default route (and an apply remove that route).
	// The CLI sets it for --try, whose automatic rollback is the safety
	// net; without it such a change is refused.
	AllowDefaultRouteChange bool
}

// Network types.
const (
	NetworkBridged = "bridged"
	NetworkNAT     = "nat"
)

// Bounds the kernel puts on links.
const (
	MaxLinkName = 15 // IFNAMSIZ-1
	MinMTU      = 68
	MaxMTU      = 65535
	MaxVLANID   = 4094
)

var (
	// The kernel accepts more (anything but '/', ':' and spaces); names
	// that tools print ambiguously (eth0@if3, eth0:1) are refused here.
	linkNameRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	networkNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)
	hostLabelRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
)

// validateLinkName checks an interface name: 1 to 15 bytes of letters,
// digits, '_', '.' and '-', not starting with '.' or '-'.
func validateLinkName(field, name string) *FieldError {
	switch {
	case name == "":
		return fieldErr(field, name, "is required")
	case len(name) > MaxLinkName:
		return fieldErr(field, name, fmt.Sprintf("is %d bytes; interface names are at most %d", len(name), MaxLinkName))
	case !linkNameRE.MatchString(name):
		return fieldErr(field, name, "interface names are letters, digits, '_', '.' and '-', not starting with '.' or '-'")
	}
	return nil
}

func validMTU(mtu int) bool { return mtu == 0 || (mtu >= MinMTU && mtu <= MaxMTU) }

func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !hostLabelRE.MatchString(l) {
			return false
		}
	}
	return true
}

// Validate checks cfg against itself and, when live is not nil, against
// the host: ports and VLAN parents must exist, names must not clash with a
// link of another type, and the interface carrying the default route must
// not be enslaved unless opts allow it. It returns every problem at once,
// as a *ValidationError (errors.Is(err, ErrInvalid)).
func Validate(cfg *Config, live *State, opts ValidateOptions) error {
	v := &validator{cfg: cfg, live: live}
	v.run(opts)
	if len(v.errs) > 0 {
		return invalid(v.errs)
	}
	return nil
}

type validator struct {
	cfg  *Config
	live *State
	errs []*FieldError
}

func (v *validator) add(fe *FieldError) {
	if fe != nil {
		v.errs = append(v.errs, fe)
	}
}

func (v *validator) addf(field string, value any, format string, args ...any) {
	v.errs = append(v.errs, fieldErr(field, value, fmt.Sprintf(format, args...)))
}

// liveType is the kind of the host's link called name, "" if none.
func (v *validator) liveType(name string) string {
	if l := v.live.Link(name); l != nil {
		return l.Type
	}
	return ""
}

// addrUse is one address or subnet and where the file puts it, for the
// overlap checks.
type addrUse struct {
	field string
	raw   string
	p     netip.Prefix
	link  string // "" for a nat subnet
}

func (v *validator) run(opts ValidateOptions) {
	c := v.cfg
	if c == nil {
		v.addf("(document)", nil, "no configuration")
		return
	}
	if c.APIVersion != APIVersion {
		v.addf("apiVersion", c.APIVersion, "want %s", APIVersion)
	}
	if c.Kind != Kind {
		v.addf("kind", c.Kind, "want %s", Kind)
	}
	if c.Hostname != "" && !validHostname(c.Hostname) {
		v.addf("hostname", c.Hostname, "must be a host name: dot-separated labels of letters, digits and '-'")
	}
	for i, s := range c.DNS.Servers {
		if a, err := netip.ParseAddr(s); err != nil || a.Zone() != "" {
			v.addf(fmt.Sprintf("dns.servers[%d]", i), s, "must be an IPv4 or IPv6 address")
		}
	}
	for i, s := range c.DNS.Search {
		if !validHostname(strings.TrimSuffix(s, ".")) {
			v.addf(fmt.Sprintf("dns.search[%d]", i), s, "must be a domain name")
		}
	}

	// Names the file creates, to catch duplicates and to resolve
	// references: kind is bridge, vlan or nat (a nat network's bridge).
	created := map[string]string{}
	createdAt := map[string]string{}
	claim := func(field, name, kind string) {
		if name == "" {
			return
		}
		if prev, dup := createdAt[name]; dup {
			v.addf(field, name, "duplicate interface name (also %s)", prev)
			return
		}
		created[name], createdAt[name] = kind, field
	}
	for i, b := range c.Bridges {
		f := fmt.Sprintf("bridges[%d].name", i)
		v.add(validateLinkName(f, b.Name))
		claim(f, b.Name, "bridge")
	}
	for i, vl := range c.VLANs {
		f := fmt.Sprintf("vlans[%d].name", i)
		v.add(validateLinkName(f, vl.Name))
		claim(f, vl.Name, "vlan")
	}
	for i, n := range c.Networks {
		if n.Type == NetworkNAT {
			f := fmt.Sprintf("networks[%d].bridge", i)
			v.add(validateLinkName(f, n.Bridge))
			claim(f, n.Bridge, "nat")
		}
	}
	mgmtVLAN := ""
	if m := c.Management; m != nil && m.VLAN != 0 && c.mgmtVLANFromList() == "" {
		// A tagged management interface not in vlans: virtcon makes it.
		mgmtVLAN = c.mgmtLink()
		if len(mgmtVLAN) > MaxLinkName {
			v.addf("management.vlan", m.VLAN, "the VLAN interface %q would be over %d bytes; declare it in vlans with a shorter name", mgmtVLAN, MaxLinkName)
		} else {
			claim("management.vlan", mgmtVLAN, "vlan")
		}
	}
	for name, kind := range created {
		t := v.liveType(name)
		want := kind
		if kind == "nat" {
			want = "bridge"
		}
		if t != "" && t != want {
			v.addf(createdAt[name], name, "exists on the host as a %s link, not a %s", t, want)
		}
	}

	// Ports.
	portOf := map[string]string{}
	for i, b := range c.Bridges {
		if !validMTU(b.MTU) {
			v.addf(fmt.Sprintf("bridges[%d].mtu", i), b.MTU, "must be %d-%d", MinMTU, MaxMTU)
		}
		for j, p := range b.Ports {
			f := fmt.Sprintf("bridges[%d].ports[%d]", i, j)
			if fe := validateLinkName(f, p); fe != nil {
				v.add(fe)
				continue
			}
			if other, dup := portOf[p]; dup {
				if other == b.Name {
					v.addf(f, p, "listed twice in bridge %q", b.Name)
				} else {
					v.addf(f, p, "is already a port of bridge %q; a port belongs to one bridge", other)
				}
				continue
			}
			portOf[p] = b.Name
			switch kind := created[p]; {
			case p == "lo":
				v.addf(f, p, "the loopback interface cannot be a bridge port")
			case kind == "bridge" || kind == "nat":
				v.addf(f, p, "is a bridge; a bridge cannot be a port of another")
			case kind == "vlan":
			case v.live == nil:
			case v.liveType(p) == "":
				v.addf(f, p, "no such interface on the host, and not a VLAN in vlans")
			case v.liveType(p) == "bridge":
				v.addf(f, p, "is a bridge on the host; a bridge cannot be a port of another")
			}
		}
	}

	// VLANs.
	vlanKey := map[string]string{}
	for i, vl := range c.VLANs {
		f := fmt.Sprintf("vlans[%d]", i)
		if fe := validateLinkName(f+".link", vl.Link); fe != nil {
			v.add(fe)
		} else if vl.Link == vl.Name {
			v.addf(f+".link", vl.Link, "a VLAN cannot be its own parent")
		} else if created[vl.Link] == "" && v.live != nil && v.liveType(vl.Link) == "" {
			v.addf(f+".link", vl.Link, "no such interface on the host, and not a bridge or VLAN in this file")
		}
		if vl.ID < 1 || vl.ID > MaxVLANID {
			v.addf(f+".id", vl.ID, "VLAN ids are 1-%d", MaxVLANID)
		} else {
			k := fmt.Sprintf("%s/%d", vl.Link, vl.ID)
			if prev, dup := vlanKey[k]; dup {
				v.addf(f+".id", vl.ID, "link %q already has VLAN %d (%s)", vl.Link, vl.ID, prev)
			}
			vlanKey[k] = f
		}
		if !validMTU(vl.MTU) {
			v.addf(f+".mtu", vl.MTU, "must be %d-%d", MinMTU, MaxMTU)
		} else if pm := v.desiredMTU(vl.Link); vl.MTU != 0 && pm != 0 && vl.MTU > pm {
			v.addf(f+".mtu", vl.MTU, "is above the MTU of its link %q (%d)", vl.Link, pm)
		}
	}

	// Addresses, gathered for the overlap check.
	var uses []addrUse
	parseAddrs := func(field, link string, addrs []string) {
		for j, a := range addrs {
			f := fmt.Sprintf("%s[%d]", field, j)
			p, err := netip.ParsePrefix(a)
			if err != nil || p.Addr().Zone() != "" {
				v.addf(f, a, "must be an address with a prefix length, e.g. 192.0.2.10/24 or 2001:db8::10/64")
				continue
			}
			if p.Addr().Is4In6() || p.Addr().IsMulticast() || p.Addr().IsUnspecified() || p.Addr().IsLoopback() {
				v.addf(f, a, "must be a unicast address")
				continue
			}
			if p.Addr().Is4() && p.Bits() < 31 && p.Addr() == p.Masked().Addr() {
				v.addf(f, a, "is the network address of its subnet; give the host's address, e.g. %s", p.Masked().Addr().Next().String()+"/"+fmt.Sprint(p.Bits()))
				continue
			}
			uses = append(uses, addrUse{f, a, p, link})
		}
	}
	for i, b := range c.Bridges {
		parseAddrs(fmt.Sprintf("bridges[%d].addresses", i), b.Name, b.Addresses)
	}
	for i, vl := range c.VLANs {
		parseAddrs(fmt.Sprintf("vlans[%d].addresses", i), vl.Name, vl.Addresses)
	}

	// Management.
	if m := c.Management; m != nil {
		ml := c.mgmtLink()
		if fe := validateLinkName("management.interface", m.Interface); fe != nil {
			v.add(fe)
		} else {
			if br, ok := portOf[m.Interface]; ok && m.VLAN == 0 {
				v.addf("management.interface", m.Interface, "is a port of bridge %q, which takes its addresses; manage the bridge instead", br)
			}
			if kind := created[m.Interface]; kind == "nat" {
				v.addf("management.interface", m.Interface, "is a nat network's bridge")
			} else if kind == "" && v.live != nil && v.liveType(m.Interface) == "" {
				v.addf("management.interface", m.Interface, "no such interface on the host, and not a bridge or VLAN in this file")
			}
		}
		if m.VLAN < 0 || m.VLAN > MaxVLANID {
			v.addf("management.vlan", m.VLAN, "VLAN ids are 1-%d (0: untagged)", MaxVLANID)
		}
		if !validMTU(m.MTU) {
			v.addf("management.mtu", m.MTU, "must be %d-%d", MinMTU, MaxMTU)
		} else if m.MTU != 0 {
			if own := c.linkMTU(ml, false); own != 0 && own != m.MTU {
				v.addf("management.mtu", m.MTU, "conflicts with the MTU %d that this file gives %q", own, ml)
			}
		}
		if m.DHCP && (len(m.Addresses) > 0 || m.Gateway != "") {
			v.addf("management.dhcp", m.DHCP, "dhcp and static addresses or gateway exclude each other")
		}
		parseAddrs("management.addresses", ml, m.Addresses)
		if m.Gateway != "" {
			gw, err := netip.ParseAddr(m.Gateway)
			switch {
			case err != nil || gw.Zone() != "":
				v.addf("management.gateway", m.Gateway, "must be an IPv4 or IPv6 address")
			case !gw.IsGlobalUnicast() && !gw.IsLinkLocalUnicast():
				v.addf("management.gateway", m.Gateway, "must be a unicast address")
			case m.DHCP || gw.IsLinkLocalUnicast():
			default:
				subnets := v.addrsOn(ml, uses)
				if (len(subnets) > 0 || v.live != nil) && !slices.ContainsFunc(subnets, func(p netip.Prefix) bool { return p.Contains(gw) }) {
					v.addf("management.gateway", m.Gateway, "is in none of the subnets of %q's addresses", ml)
				}
			}
		}
	}

	// Networks.
	netNames := map[string]string{}
	for i, n := range c.Networks {
		f := fmt.Sprintf("networks[%d]", i)
		if !networkNameRE.MatchString(n.Name) {
			v.addf(f+".name", n.Name, "must be 1-63 letters, digits, '_', '.' or '-', starting and ending with a letter or digit")
		} else if prev, dup := netNames[n.Name]; dup {
			v.addf(f+".name", n.Name, "duplicate network name (also %s)", prev)
		} else {
			netNames[n.Name] = f + ".name"
		}
		switch n.Type {
		case NetworkBridged:
			switch {
			case n.Bridge == "":
				v.addf(f+".bridge", n.Bridge, "is required: the bridge VM NICs join")
			case created[n.Bridge] == "bridge":
			case created[n.Bridge] != "":
				v.addf(f+".bridge", n.Bridge, "is a %s, not a bridge", created[n.Bridge])
			case v.live != nil && v.liveType(n.Bridge) == "bridge":
			default:
				v.addf(f+".bridge", n.Bridge, "unknown bridge: not in bridges, nor a bridge on the host")
			}
			if n.Subnet != "" {
				v.addf(f+".subnet", n.Subnet, "only nat networks have a subnet; a bridged network uses its LAN's")
			}
		case NetworkNAT:
			if n.Subnet == "" {
				v.addf(f+".subnet", n.Subnet, "is required for a nat network, e.g. 10.100.0.0/24")
				break
			}
			p, err := netip.ParsePrefix(n.Subnet)
			switch {
			case err != nil:
				v.addf(f+".subnet", n.Subnet, "must be an IPv4 subnet, e.g. 10.100.0.0/24")
			case !p.Addr().Is4():
				v.addf(f+".subnet", n.Subnet, "nat networks are IPv4")
			case p.Bits() > 29:
				v.addf(f+".subnet", n.Subnet, "is too small: at most /29, to leave room for the bridge and DHCP")
			case p != p.Masked():
				v.addf(f+".subnet", n.Subnet, "must be the network address, e.g. %s", p.Masked())
			default:
				uses = append(uses, addrUse{f + ".subnet", n.Subnet, p, ""})
			}
		case "":
			v.addf(f+".type", n.Type, "is required: bridged or nat")
		default:
			v.addf(f+".type", n.Type, "unknown network type: want bridged or nat")
		}
	}

	v.checkOverlaps(uses)
	v.checkNATvsHost(uses)

	// The rule that keeps a console operator from cutting the host off.
	if !opts.AllowDefaultRouteChange && v.live != nil {
		carriers := v.live.DefaultRouteLinks()
		for i, b := range c.Bridges {
			for j, p := range b.Ports {
				l := v.live.Link(p)
				if l == nil || l.Master == b.Name || !slices.Contains(carriers, p) {
					continue
				}
				v.errs = append(v.errs, &FieldError{Field: fmt.Sprintf("bridges[%d].ports[%d]", i, j), Value: p,
					Msg: fmt.Sprintf("carries the host's default route; enslaving it to %q could cut the host off", b.Name), Kind: ErrPortCarriesDefaultRoute})
			}
		}
	}
}

// checkOverlaps refuses the same address twice and subnets that overlap on
// different links or with a nat network.
func (v *validator) checkOverlaps(uses []addrUse) {
	for i := range uses {
		for j := range i {
			a, b := uses[j], uses[i]
			if a.p.Addr() == b.p.Addr() && a.link != "" && b.link != "" {
				if a.link == b.link && a.p.Bits() == b.p.Bits() {
					v.addf(b.field, b.raw, "duplicate address (also %s)", a.field)
				} else {
					v.addf(b.field, b.raw, "the same address is also at %s", a.field)
				}
				break
			}
			if a.link == b.link && a.link != "" {
				continue // several addresses of one subnet on one link
			}
			if a.p.Masked().Overlaps(b.p.Masked()) {
				v.addf(b.field, b.raw, "overlaps %s (%s)", a.field, a.raw)
				break
			}
		}
	}
}

// checkNATvsHost refuses a nat subnet that overlaps an address the host
// has on a link this file does not manage (its LAN, a VPN): guests could
// not reach it, and masquerading would be ambiguous.
func (v *validator) checkNATvsHost(uses []addrUse) {
	if v.live == nil {
		return
	}
	mine := map[string]bool{}
	for _, n := range v.cfg.Links() {
		mine[n] = true
	}
	for _, n := range v.cfg.Networks {
		if n.Type == NetworkNAT {
			mine[n.Bridge] = true
		}
	}
	for _, u := range uses {
		if u.link != "" {
			continue
		}
		for _, l := range v.live.Links {
			if mine[l.Name] || l.Type == "loopback" || l.Name == "lo" {
				continue
			}
			for _, a := range l.Addresses {
				if a.Masked().Overlaps(u.p) {
					v.addf(u.field, u.raw, "overlaps the address %s of the host's interface %q", a, l.Name)
				}
			}
		}
	}
}

// addrsOn lists the addresses link name will have: those the file gives
// it, those it has, and, for a bridge of this file, those its ports have
// (the apply moves them to the bridge).
func (v *validator) addrsOn(name string, uses []addrUse) []netip.Prefix {
	var out []netip.Prefix
	for _, u := range uses {
		if u.link == name {
			out = append(out, u.p)
		}
	}
	on := []string{name}
	for _, b := range v.cfg.Bridges {
		if b.Name == name {
			on = append(on, b.Ports...)
		}
	}
	for _, n := range on {
		if l := v.live.Link(n); l != nil {
			out = append(out, l.Addresses...)
		}
	}
	return out
}

// desiredMTU is the MTU link name will have: the file's, else the host's,
// 0 when neither says.
func (v *validator) desiredMTU(name string) int {
	if m := v.cfg.linkMTU(name, true); m != 0 {
		return m
	}
	if l := v.live.Link(name); l != nil {
		return l.MTU
	}
	return 0
}
