package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, created with perm (the directory is made
// 0700 if missing), durably: it survives a power loss once Write returns.
func Write(path string, data []byte, perm os.FileMode) error { return write(path, data, perm, true) }

// WriteVolatile replaces path atomically but without fsync: other
// processes, and this one after a crash or kill, see the old or the new
// content, but a power loss may undo it. For intent records that a later
// durable write confirms.
func WriteVolatile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		if err = f.Sync(); err != nil {
			return fmt.Errorf("write %s: fsync: %w", path, err)
		}
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
