package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireRoot skips t unless it runs as root (effective uid 0); why says
// what the test does that needs root ("creates network namespaces and
// veth pairs") and follows "needs root: " in the skip message.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	requireEUID(t, os.Geteuid(), why)
}

func requireEUID(t testing.TB, euid int, why string) {
	t.Helper()
	if euid != 0 {
		t.Skipf("needs root: %s", why)
	}
}

// RequireCommand returns the path of the program name found on PATH, or
// skips t naming it, with how to get it (hint, such as "apt-get install
// qemu-utils") and why the test needs it.
func RequireCommand(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("needs %s (%s): %v", name, hint, err)
	}
	return p
}

// Logger is a logger for the code under test that writes, at debug level,
// to t's own output: shown with -v or when t fails, beside t's other
// lines. Like t.Log, it must not be written after t and its parents have
// returned: a goroutine that can outlive t gets another logger.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Buffer is a bytes.Buffer that one goroutine may write (a process's
// output, a logger) while another reads it. Its zero value is empty and
// ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitForText reads a text (a terminal's screen, a process's output)
// every interval until it holds every want, and returns it; once timeout
// has passed it fails t, naming the first want missing and showing the
// last text read.
func WaitForText(t testing.TB, timeout, interval time.Duration, read func() string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := read()
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %s in:\n%s", missing, timeout, s)
		}
		time.Sleep(interval)
	}
}

// AllocatedBytes is the space the file at path takes on disk (its blocks),
// which is less than its size where it has holes.
func AllocatedBytes(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

// RepoRoot is the directory holding go.mod, found by walking up from the
// working directory (a test runs in its package's directory).
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}
