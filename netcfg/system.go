package netcfg

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
	"golang.org/x/sys/unix"
)

// applySystem writes the host-wide settings of cfg: /etc/resolv.conf from
// DNS and /etc/hostname from Hostname, under the layout's root, and sets
// the kernel's host name when the root is the real one. Empty settings
// leave the files alone. It returns a description of each change.
func applySystem(layout paths.Layout, cfg *Config) ([]string, error) {
	var changed []string
	if len(cfg.DNS.Servers) > 0 || len(cfg.DNS.Search) > 0 {
		var b bytes.Buffer
		b.WriteString("# Written by virtcon from network.yaml (dns).\n")
		if len(cfg.DNS.Search) > 0 {
			fmt.Fprintf(&b, "search %s\n", strings.Join(cfg.DNS.Search, " "))
		}
		for _, s := range cfg.DNS.Servers {
			fmt.Fprintf(&b, "nameserver %s\n", s)
		}
		path := filepath.Join(layout.Root, "etc", "resolv.conf")
		ok, err := writeIfChanged(path, b.Bytes(), 0o644)
		if err != nil {
			return changed, fmt.Errorf("dns: %w", err)
		}
		if ok {
			changed = append(changed, "write "+path)
		}
	}
	if cfg.Hostname != "" {
		path := filepath.Join(layout.Root, "etc", "hostname")
		ok, err := writeIfChanged(path, []byte(cfg.Hostname+"\n"), 0o644)
		if err != nil {
			return changed, fmt.Errorf("hostname: %w", err)
		}
		if ok {
			changed = append(changed, "write "+path)
		}
		if filepath.Clean(layout.Root) == "/" {
			if cur, err := os.Hostname(); err != nil || cur != cfg.Hostname {
				if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
					return changed, fmt.Errorf("hostname %q: %w", cfg.Hostname, err)
				}
				changed = append(changed, "set host name "+cfg.Hostname)
			}
		}
	}
	return changed, nil
}

func writeIfChanged(path string, data []byte, perm os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	// resolv.conf is often a symlink (systemd-resolved, resolvconf):
	// replacing the link, not writing through it, is what makes ours stick.
	return true, atomicfile.Write(path, data, perm)
}
