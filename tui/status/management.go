package status

import (
	"fmt"
	"strings"

	"github.com/virtcon/virtcon/tui/styles"
)

func (m *Model) managementLines() []string {
	s := m.c.Styles
	head := s.Section.Render("MANAGEMENT")
	switch {
	case !m.netLoaded:
		return []string{head, "  " + m.loading()}
	case m.netErr != nil && len(m.addrs) == 0:
		return []string{head, "  " + s.Badgef(styles.Unknown) + " addresses unavailable: " + m.clean(m.netErr.Error())}
	case len(m.addrs) == 0:
		return []string{head, "  " + s.Badgef(styles.Warning) + " no address: the host cannot be reached over the network"}
	}
	lines := []string{head}
	// link-local addresses reach nobody beyond the link: listed only when
	// there is nothing else
	addrs := make([]Addr, 0, len(m.addrs))
	for _, a := range m.addrs {
		if !a.Prefix.Addr().IsLinkLocalUnicast() {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		addrs = m.addrs
	}
	for i, a := range addrs {
		if i == maxAddrs-1 && len(addrs) > maxAddrs {
			lines = append(lines, fmt.Sprintf("  %s %d more addresses", s.Bullet, len(addrs)-i))
			break
		}
		url := ""
		if m.web != nil && !a.Prefix.Addr().IsLinkLocalUnicast() {
			url = m.clean(webURLFor(m.web, a.Prefix.Addr()))
		}
		lines = append(lines, strings.TrimRight(fmt.Sprintf("  %-8s %-28s %s", m.clean(a.Iface), a.Prefix, url), " "))
	}
	return append(lines, m.webLine(addrs))
}

// webLine says whether the web terminal runs, by its own record (never by
// a port that listens): the URLs the address lines do not show, or where
// it listens, and its certificate's fingerprint to check in the browser.
func (m *Model) webLine(addrs []Addr) string {
	s := m.c.Styles
	if m.web == nil {
		return "  " + s.Muted.Render("web terminal not running: use SSH or this console")
	}
	shown := map[string]bool{}
	for _, a := range addrs {
		shown[webURLFor(m.web, a.Prefix.Addr())] = true
	}
	var where []string
	for _, u := range m.web.URLs {
		if _, ok := httpsHost(u); ok && !shown[u] {
			where = append(where, u)
		}
	}
	if len(where) == 0 && m.web.Listen != "" {
		where = append(where, "on "+m.web.Listen)
	}
	l := "  web terminal " + strings.Join(where, " ")
	if fp := m.web.CertSHA256; fp != "" {
		// the first 8 bytes fit the line: enough to tell a certificate
		// from another one in the browser's view of it
		if len(fp) > 23 {
			fp = fp[:23] + dots(s)
		}
		l += "  cert " + fp
	}
	return m.clean(l)
}
