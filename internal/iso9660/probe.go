package iso9660

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrNotISO9660 is returned by Probe for data that holds no ISO 9660
// volume descriptor where one must be.
var ErrNotISO9660 = errors.New("not an ISO 9660 image (no CD001 volume descriptor at sector 16)")

// standardID is the identifier every ISO 9660 volume descriptor carries
// in its bytes 1 to 5 (ECMA-119 8.1.2).
var standardID = []byte("CD001")

// Probe checks that r starts an ISO 9660 image: the first volume
// descriptor, at sector 16 (after the system area, where a hybrid ISO
// keeps its MBR), has the standard identifier CD001 and version 1. It
// reads those 7 bytes only; it says nothing of whether the image boots.
func Probe(r io.ReaderAt) error {
	var vd [7]byte
	n, err := r.ReadAt(vd[:], firstVDSector*sectorSize)
	if n < len(vd) {
		if err == nil || errors.Is(err, io.EOF) {
			return ErrNotISO9660 // shorter than 16 sectors and a descriptor
		}
		return fmt.Errorf("iso9660: read the volume descriptor: %w", err)
	}
	if !bytes.Equal(vd[1:6], standardID) || vd[6] != 1 {
		return ErrNotISO9660
	}
	return nil
}
