package netcfg

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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

// SystemSnapshot is what applySystem may change, as it was before a try:
// a rollback puts it back, so "the previous settings are restored" holds
// for DNS and the host name too.
type SystemSnapshot struct {
	Files []FileSnapshot `json:"files"`
	// Hostname is the kernel's host name; "" when the root is not /,
	// where applySystem leaves the kernel alone.
	Hostname string `json:"hostname,omitempty"`
}

// FileSnapshot is one file as it was: absent, a symbolic link (resolv.conf
// often is one, managed by systemd-resolved or resolvconf: the link comes
// back, not a copy of its target), or a regular file.
type FileSnapshot struct {
	Path   string      `json:"path"`
	Exists bool        `json:"exists"`
	Link   string      `json:"link,omitempty"`
	Data   []byte      `json:"data,omitempty"`
	Mode   os.FileMode `json:"mode,omitempty"`
}

// systemFiles are the files applySystem writes under the layout's root.
func systemFiles(layout paths.Layout) []string {
	return []string{
		filepath.Join(layout.Root, "etc", "resolv.conf"),
		filepath.Join(layout.Root, "etc", "hostname"),
	}
}

// takeSystemSnapshot records the files applySystem writes and, when the
// root is /, the kernel's host name.
func takeSystemSnapshot(layout paths.Layout) (*SystemSnapshot, error) {
	s := &SystemSnapshot{}
	for _, path := range systemFiles(layout) {
		f := FileSnapshot{Path: path}
		st, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("snapshot %s: %w", path, err)
		case st.Mode()&fs.ModeSymlink != 0:
			f.Exists = true
			if f.Link, err = os.Readlink(path); err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", path, err)
			}
		default:
			f.Exists, f.Mode = true, st.Mode().Perm()
			if f.Data, err = os.ReadFile(path); err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", path, err)
			}
		}
		s.Files = append(s.Files, f)
	}
	if filepath.Clean(layout.Root) == "/" {
		name, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("snapshot host name: %w", err)
		}
		s.Hostname = name
	}
	return s, nil
}

// restore puts every file and the kernel's host name back, each replaced
// atomically and only if it differs; it carries on past a failure.
func (s *SystemSnapshot) restore() error {
	var errs []error
	for i := range s.Files {
		if err := s.Files[i].restore(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Hostname != "" {
		if cur, err := os.Hostname(); err != nil || cur != s.Hostname {
			if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
				errs = append(errs, fmt.Errorf("restore host name %q: %w", s.Hostname, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (f *FileSnapshot) restore() error {
	st, err := os.Lstat(f.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	exists := err == nil
	switch {
	case !f.Exists:
		if exists {
			if err := os.Remove(f.Path); err != nil {
				return fmt.Errorf("restore %s: %w", f.Path, err)
			}
		}
		return nil
	case f.Link != "":
		if exists && st.Mode()&fs.ModeSymlink != 0 {
			if cur, err := os.Readlink(f.Path); err == nil && cur == f.Link {
				return nil
			}
		}
		return symlinkReplace(f.Link, f.Path)
	default:
		if exists && st.Mode().IsRegular() && st.Mode().Perm() == f.Mode {
			if cur, err := os.ReadFile(f.Path); err == nil && bytes.Equal(cur, f.Data) {
				return nil
			}
		}
		if err := atomicfile.Write(f.Path, f.Data, f.Mode); err != nil {
			return fmt.Errorf("restore %s: %w", f.Path, err)
		}
		return nil
	}
}

// symlinkReplace makes path a symbolic link to target atomically: the new
// link is made beside it and renamed over it.
func symlinkReplace(target, path string) error {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(b))
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
