package ca

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// LoadOrCreateKEK returns the key encryption key kept in the file at path,
// making one (KEKSize random bytes, mode 0600, its directory 0700 when
// missing) if there is no file there yet. It never replaces a file: one of
// the wrong size, not a regular file, or open to group or other is an
// error naming the path and the problem, and stays as it is. Two callers
// racing to create it get the same key.
func LoadOrCreateKEK(path string) ([]byte, error) {
	kek, err := readKEK(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return kek, err
	}
	if err := createKEK(path); err != nil {
		return nil, err
	}
	return readKEK(path)
}

func readKEK(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ca key encryption key %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ca key encryption key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("ca key encryption key %s: not a regular file (%s)", path, st.Mode().Type())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("ca key encryption key %s: mode %04o: readable or writable by group or other, want 0600", path, perm)
	}
	if st.Size() != KEKSize {
		return nil, fmt.Errorf("ca key encryption key %s: %d bytes, want %d (refusing to use or replace it)", path, st.Size(), KEKSize)
	}
	kek := make([]byte, KEKSize)
	if _, err := io.ReadFull(f, kek); err != nil {
		return nil, fmt.Errorf("ca key encryption key %s: read: %w", path, err)
	}
	if n, _ := f.Read(make([]byte, 1)); n != 0 {
		return nil, fmt.Errorf("ca key encryption key %s: grew while being read, want %d bytes", path, KEKSize)
	}
	return kek, nil
}

// createKEK writes a new key to a temporary name (durably, atomicfile) and
// hard-links it into place: the link fails if path exists, so a key
// another process made in the meantime is never overwritten, and path
// never holds a partly written key.
func createKEK(path string) error {
	kek := make([]byte, KEKSize)
	defer zero(kek)
	if _, err := rand.Read(kek); err != nil {
		return fmt.Errorf("ca key encryption key %s: %w", path, err)
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return fmt.Errorf("ca key encryption key %s: %w", path, err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new-"+hex.EncodeToString(suffix[:]))
	if err := atomicfile.Write(tmp, kek, 0o600); err != nil {
		return fmt.Errorf("ca key encryption key: %w", err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another creator won; readKEK checks theirs
		}
		return fmt.Errorf("ca key encryption key %s: %w", path, err)
	}
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("ca key encryption key %s: remove %s: %w", path, tmp, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
