package vm

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/virtcon/virtcon/internal/fielderr"
)

// ErrInvalidSnapshotName is a snapshot name that is not one (a narrower
// kind of ErrInvalid: errors.Is(err, ErrInvalid) holds too).
var ErrInvalidSnapshotName = fielderr.NewKind("invalid snapshot name", ErrInvalid)

// shownValueMax is how much of a bad value an error echoes: a name is at
// most 63 characters, so a longer value is a mistake (a path, a pasted
// line) shown by its start and length.
const shownValueMax = 64

// cutValue is a bad string value as an error shows it: in full when short,
// else its first shownValueMax characters and its length.
type cutValue string

func (v cutValue) String() string {
	s := string(v)
	n := utf8.RuneCountInString(s)
	if n <= shownValueMax {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… of %d characters", string([]rune(s)[:shownValueMax]), n)
}

// shownValue is the value a FieldError carries for a string: the string
// itself when short (so it reads as before), a cutValue when long.
func shownValue(s string) any {
	if utf8.RuneCountInString(s) <= shownValueMax {
		return s
	}
	return cutValue(s)
}

// invalidSnapshotName is a bad snapshot name as the operations return it.
func invalidSnapshotName(fe *FieldError) error {
	return fielderr.New(ErrInvalidSnapshotName, fe)
}

// Snapshot names are unique regardless of case, as VM names are: a second
// snapshot differing only in case is refused (CreateSnapshot), and a name
// is looked up exactly, else regardless of case. qcow2 tags are
// case-sensitive, so disks written outside virt may hold two tags that
// differ only in case; then only the exact name finds either.

// lookupSnapshot finds name among snaps: the exact name, else the one
// snapshot whose name differs from it only in case. Several such (tags
// made outside virt) and no exact one is an error naming them.
func lookupSnapshot(snaps []Snapshot, vmName, name string) (Snapshot, error) {
	var folded []Snapshot
	for _, sn := range snaps {
		if sn.Name == name {
			return sn, nil
		}
		if strings.EqualFold(sn.Name, name) {
			folded = append(folded, sn)
		}
	}
	switch len(folded) {
	case 0:
		return Snapshot{}, &SnapshotNotFoundError{VM: vmName, Name: name}
	case 1:
		return folded[0], nil
	}
	names := make([]string, len(folded))
	for i, sn := range folded {
		names[i] = fmt.Sprintf("%q", sn.Name)
	}
	return Snapshot{}, invalidSnapshotName(fieldErr("snapshot", shownValue(name),
		"names several snapshots that differ only in case ("+strings.Join(names, ", ")+"): give the exact name"))
}
