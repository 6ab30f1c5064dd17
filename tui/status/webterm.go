package status

import (
	"net/netip"
	"net/url"

	"github.com/virtcon/virtcon/webterm"
)

// The web terminal's record (webterm.Record) is the core's: the server
// writes it, webterm.Read tells a live one from a stale one. The screen
// only draws it.

// webURLFor is the record's URL that reaches address a, "" when none does.
func webURLFor(w *webterm.Record, a netip.Addr) string {
	for _, u := range w.URLs {
		if h, ok := httpsHost(u); ok {
			if ip, err := netip.ParseAddr(h); err == nil && ip.Unmap().WithZone("") == a.Unmap().WithZone("") {
				return u
			}
		}
	}
	return ""
}

// httpsHost is the host of an https:// URL.
func httpsHost(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return "", false
	}
	return u.Hostname(), true
}
