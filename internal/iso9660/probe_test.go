package iso9660

import (
	"bytes"
	"errors"
	"testing"
)

func TestProbe(t *testing.T) {
	img := mustWrite(t, "cidata", seedFiles())
	withVD := func(vd string) []byte {
		b := make([]byte, 17*sectorSize)
		copy(b[16*sectorSize:], vd)
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr error
	}{
		{"written by Write", img, nil},
		{"primary descriptor", withVD("\x01CD001\x01"), nil},
		{"boot record first", withVD("\x00CD001\x01"), nil},
		{"empty", nil, ErrNotISO9660},
		{"shorter than the system area", make([]byte, 4096), ErrNotISO9660},
		{"zeros", make([]byte, 20*sectorSize), ErrNotISO9660},
		{"identifier one sector early", append(make([]byte, 15*sectorSize), withVD("\x01CD001\x01")[16*sectorSize:]...), ErrNotISO9660},
		{"wrong version", withVD("\x01CD001\x02"), ErrNotISO9660},
		{"UDF only", withVD("\x00BEA01\x01"), ErrNotISO9660},
		{"cut in the identifier", withVD("\x01CD0")[:16*sectorSize+4], ErrNotISO9660},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Probe(bytes.NewReader(tc.data))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Probe: %v; want %v", err, tc.wantErr)
			}
		})
	}
}
