package status

import (
	"strings"

	"github.com/virtcon/virtcon/tui/common"
)

// Content is the status screen's body for w x h cells, without the frame
// and the key legend: the app draws those around it.
func (m *Model) Content(w, h int) string {
	lines := m.statusLines()
	if len(lines) > 0 {
		// the app's header already shows product, host name and time
		lines = lines[1:]
		for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
			lines = lines[1:]
		}
	}
	return common.Fit(lines, w, h, m.c.Styles.Ellipsis)
}

// Hostname is the host's name once the inventory has loaded, else "".
func (m *Model) Hostname() string {
	if m.inv == nil {
		return ""
	}
	return m.inv.Hostname
}
