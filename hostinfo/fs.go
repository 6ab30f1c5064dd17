package hostinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// hostFS reads files of a host under its root. Paths are given relative to
// the host root ("sys/kernel/mm/..."), so a fixture tree and the live machine
// are read by the same code.
type hostFS struct {
	root string
}

func (h hostFS) path(rel string) string { return filepath.Join(h.root, rel) }

// live reports whether the root is the running machine's own root.
func (h hostFS) live() bool { return filepath.Clean(h.root) == "/" }

func (h hostFS) readString(rel string) (string, error) {
	b, err := os.ReadFile(h.path(rel))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (h hostFS) readInt(rel string) (int64, error) {
	s, err := h.readString(rel)
	if err != nil {
		return 0, err
	}
	base := 10
	if strings.HasPrefix(s, "0x") {
		s, base = s[2:], 16
	}
	v, err := strconv.ParseInt(s, base, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not a number: %q", h.path(rel), s)
	}
	return v, nil
}

func (h hostFS) exists(rel string) bool {
	_, err := os.Stat(h.path(rel))
	return err == nil
}

// linkBase returns the last element of a symlink's target (a driver name,
// an IOMMU group number).
func (h hostFS) linkBase(rel string) (string, error) {
	t, err := os.Readlink(h.path(rel))
	if err != nil {
		return "", err
	}
	return filepath.Base(t), nil
}

// list returns the sorted names in a directory, those matching prefix only.
func (h hostFS) list(rel, prefix string) ([]string, error) {
	ents, err := os.ReadDir(h.path(rel))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// isNotExist reports a missing file, however wrapped.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// isPermission reports a permission failure, however wrapped.
func isPermission(err error) bool { return errors.Is(err, fs.ErrPermission) }

// naturalLess orders "node2" before "node10" and PCI addresses lexically.
func naturalLess(a, b string) bool {
	ai, aerr := strconv.Atoi(strings.TrimLeft(a, "abcdefghijklmnopqrstuvwxyz-_"))
	bi, berr := strconv.Atoi(strings.TrimLeft(b, "abcdefghijklmnopqrstuvwxyz-_"))
	if aerr == nil && berr == nil && ai != bi {
		return ai < bi
	}
	return a < b
}

// parseCPUList expands "0-3,8,10-11" to the CPU numbers.
func parseCPUList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: bad element %q", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
