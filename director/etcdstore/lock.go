package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/virtcon/virtcon/internal/flock"
)

// lockDir takes DataDir/lock without waiting: a second process on the same
// data dir would otherwise block forever inside etcd's own bbolt flock. The
// holder's pid is written into the lock file (same inode: no rename) so the
// loser can say who has it.
func lockDir(dir string) (*flock.Lock, error) {
	path := filepath.Join(dir, "lock")
	done, cancel := context.WithCancel(context.Background())
	cancel() // an already-done ctx makes Acquire try once
	l, err := flock.Acquire(done, path)
	if err != nil {
		if !errors.Is(err, flock.ErrLocked) {
			return nil, fmt.Errorf("etcdstore: %w", err)
		}
		if pid := lockHolder(path); pid > 0 {
			return nil, fmt.Errorf("etcdstore: %s: %w (pid %d)", dir, ErrLocked, pid)
		}
		return nil, fmt.Errorf("etcdstore: %s: %w", dir, ErrLocked)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		l.Release()
		return nil, fmt.Errorf("etcdstore: lock %s: record pid: %w", path, err)
	}
	return l, nil
}

// lockHolder is the pid recorded in the lock file, 0 when unknown or when
// that process is gone (the file outlives its holder).
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err != nil {
		return 0
	}
	return pid
}
