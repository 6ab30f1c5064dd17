package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// Names of the console lock files under the layout's RunDir.
const (
	ConsoleLockFile   = "console.lock"
	ConsoleHolderFile = "console-holder.json"
)

// Holder says who holds the console writer lock.
type Holder struct {
	User  string    `json:"user"`
	TTY   string    `json:"tty"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// String reads "alice on tty1 since 09:12" (local time), or "another
// console" when the holder record could not be read.
func (h Holder) String() string {
	if h.User == "" {
		return "another console"
	}
	s := h.User
	if h.TTY != "" {
		s += " on " + h.TTY
	}
	if !h.Since.IsZero() {
		s += " since " + h.Since.Local().Format("15:04")
	}
	return s
}

// ConsoleLock is the host-wide writer lock held by one console (tty1,
// ttyS0, SSH, web terminal). It is a flock(2) on <RunDir>/console.lock: the
// kernel drops it when the holding process exits or is killed, so a crashed
// console never blocks the host.
type ConsoleLock struct {
	mu         sync.Mutex
	f          *os.File
	holderPath string
	holder     Holder
}

// AcquireConsole takes the writer lock for user on tty without waiting.
// When another live process, or another AcquireConsole of this process,
// holds it, it returns (nil, holder, nil), holder read from the record that
// process wrote (a zero Holder if unreadable). The holder record
// <RunDir>/console-holder.json (0600) is replaced atomically.
func AcquireConsole(layout paths.Layout, user, tty string) (*ConsoleLock, *Holder, error) {
	dir := layout.RunDir()
	lockPath := filepath.Join(dir, ConsoleLockFile)
	holderPath := filepath.Join(dir, ConsoleHolderFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("console lock: %w", err)
	}
	// A new open file description on every call: flock locks belong to it,
	// so two acquisitions within one process conflict as well. Go opens
	// with O_CLOEXEC, so a child (QEMU, a helper) never inherits the lock.
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("console lock %s: %w", lockPath, err)
	}
	if err := flockNB(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			h := readHolder(holderPath)
			return nil, &h, nil
		}
		return nil, nil, fmt.Errorf("console lock %s: %w", lockPath, err)
	}
	l := &ConsoleLock{
		f:          f,
		holderPath: holderPath,
		holder:     Holder{User: user, TTY: tty, PID: os.Getpid(), Since: time.Now()},
	}
	b, err := json.Marshal(l.holder)
	if err == nil {
		// /run is a tmpfs and the record is advisory: no fsync.
		err = atomicfile.WriteVolatile(holderPath, b, 0o600)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("console lock: holder record: %w", err)
	}
	return l, nil, nil
}

func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// readHolder reads the record of the process holding the lock. Between a
// holder's flock and its record write, the file is missing or still names
// the previous, dead holder; a short retry covers that window.
func readHolder(path string) Holder {
	for range 10 {
		var h Holder
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &h) == nil && h.PID > 0 && processAlive(h.PID) {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
	return Holder{}
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Holder is the record this lock wrote.
func (l *ConsoleLock) Holder() Holder {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder
}

// Release removes the holder record and drops the lock. It is idempotent
// and safe on a nil lock.
func (l *ConsoleLock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	// Remove the record while still holding the lock, so it never names
	// a holder that is gone.
	var errs []error
	if err := os.Remove(l.holderPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := l.f.Close(); err != nil {
		errs = append(errs, err)
	}
	l.f = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("console lock: release: %w", err)
	}
	return nil
}
