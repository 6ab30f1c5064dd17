package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"net/url"
	"os"
	"syscall"

	"github.com/virtcon/virtcon/paths"
)

// WebTerminal is the runtime record a running web terminal (`virt
// webterm`) keeps at paths.Layout.WebtermRecordFile: where it listens, how
// to reach it, its certificate and its process. The status screen trusts
// nothing else: something listening on the web terminal's port is not
// necessarily virtcon's.
type WebTerminal struct {
	// Listen is the address it listens on ("0.0.0.0:8443", "[::]:8443").
	Listen string `json:"listen"`
	// URLs are the https:// addresses an operator can open, one per
	// address or name it serves.
	URLs []string `json:"urls"`
	// CertSHA256 is the fingerprint of its TLS certificate, so an operator
	// can check what the browser shows (hex, colon-separated).
	CertSHA256 string `json:"certSha256"`
	// PID is its process: the record of one that is gone is stale.
	PID int `json:"pid"`
}

// ReadWebTerminal returns the web terminal's record when it exists and
// its process is alive; nil and no error when there is none, or when the
// record was left by a process that is gone. A record that cannot be read
// is an error, and the screen then shows no URL either.
func ReadWebTerminal(layout paths.Layout) (*WebTerminal, error) {
	path := layout.WebtermRecordFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("web terminal record: %w", err)
	}
	var w WebTerminal
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("web terminal record %s: %w", path, err)
	}
	if w.PID <= 0 {
		return nil, fmt.Errorf("web terminal record %s: pid %d: not a process", path, w.PID)
	}
	if !processAlive(w.PID) {
		return nil, nil
	}
	return &w, nil
}

// processAlive reports whether a process with pid exists (signal 0: a
// check, nothing is sent). EPERM means it exists under another user.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// urlFor is the record's URL that reaches address a, "" when none does.
func (w *WebTerminal) urlFor(a netip.Addr) string {
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
