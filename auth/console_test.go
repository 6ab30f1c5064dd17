package auth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/paths"
)

// envHoldConsole makes the test binary a helper that holds the console lock
// under the given root until its stdin closes (or it is killed).
const envHoldConsole = "VIRTCON_AUTH_TEST_HOLD_CONSOLE"

// testBinaryModes are the helpers this test binary can be started as: an
// environment variable, and what runs with its value instead of the tests.
var testBinaryModes = map[string]func(string) int{envHoldConsole: holdConsole}

func TestMain(m *testing.M) {
	reexec.Init()
	for env, run := range testBinaryModes {
		if v := os.Getenv(env); v != "" {
			os.Exit(run(v))
		}
	}
	os.Exit(m.Run())
}

func holdConsole(root string) int {
	l, h, err := AcquireConsole(paths.New(root), "child", "ttyS9")
	if err != nil || h != nil {
		fmt.Fprintf(os.Stderr, "helper: AcquireConsole = %v, holder %v\n", err, h)
		return 2
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	l.Release()
	return 0
}

func TestConsoleLock(t *testing.T) {
	layout := paths.New(t.TempDir())
	first, holder, err := AcquireConsole(layout, "alice", "tty1")
	if err != nil || holder != nil || first == nil {
		t.Fatalf("first AcquireConsole = %v, %v, %v; want a lock", first, holder, err)
	}
	defer first.Release()

	recordPath := filepath.Join(layout.RunDir(), ConsoleHolderFile)
	for path, perm := range map[string]os.FileMode{
		layout.RunDir(): 0o700,
		recordPath:      0o600,
		filepath.Join(layout.RunDir(), ConsoleLockFile): 0o600,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != perm {
			t.Errorf("%s mode %v; want %v", path, st.Mode().Perm(), perm)
		}
	}
	var rec Holder
	b, _ := os.ReadFile(recordPath)
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("holder record %q: %v", b, err)
	}
	if rec.User != "alice" || rec.TTY != "tty1" || rec.PID != os.Getpid() || time.Since(rec.Since) > time.Minute {
		t.Errorf("holder record = %+v; want alice on tty1, pid %d, since now", rec, os.Getpid())
	}
	if got := first.Holder(); got.User != "alice" || got.PID != os.Getpid() {
		t.Errorf("Holder() = %+v", got)
	}

	// flock locks belong to the open file description: a second
	// acquisition in this very process is refused and told who holds it.
	second, holder, err := AcquireConsole(layout, "bob", "ttyS0")
	if err != nil || second != nil {
		t.Fatalf("second AcquireConsole = %v, %v; want refusal", second, err)
	}
	if holder == nil || holder.User != "alice" || holder.TTY != "tty1" || holder.PID != os.Getpid() {
		t.Fatalf("holder = %+v; want alice on tty1", holder)
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("second Release = %v; want nil (idempotent)", err)
	}
	if _, err := os.Stat(recordPath); !os.IsNotExist(err) {
		t.Errorf("holder record after Release: %v; want it removed", err)
	}
	third, holder, err := AcquireConsole(layout, "bob", "ttyS0")
	if err != nil || third == nil {
		t.Fatalf("AcquireConsole after Release = %v, %v, %v; want a lock", third, holder, err)
	}
	third.Release()

	var none *ConsoleLock
	if err := none.Release(); err != nil {
		t.Errorf("nil Release = %v", err)
	}
}

func TestConsoleLockUnreadableHolder(t *testing.T) {
	layout := paths.New(t.TempDir())
	l, _, err := AcquireConsole(layout, "alice", "tty1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := os.WriteFile(filepath.Join(layout.RunDir(), ConsoleHolderFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, holder, err := AcquireConsole(layout, "bob", "ttyS0")
	if err != nil || other != nil {
		t.Fatalf("AcquireConsole = %v, %v; want refusal", other, err)
	}
	if holder == nil || *holder != (Holder{}) {
		t.Errorf("holder = %+v; want a zero Holder", holder)
	}
	if got := holder.String(); got != "another console" {
		t.Errorf("zero Holder reads %q", got)
	}
}

// A console that dies (SIGKILL: no Release, no cleanup) frees the lock.
func TestConsoleLockDiesWithProcess(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHoldConsole+"="+root)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q, %v; want \"locked\"", line, err)
	}

	l, holder, err := AcquireConsole(layout, "alice", "tty1")
	if err != nil || l != nil {
		t.Fatalf("AcquireConsole while the child holds it = %v, %v; want refusal", l, err)
	}
	if holder == nil || holder.User != "child" || holder.TTY != "ttyS9" || holder.PID != cmd.Process.Pid {
		t.Errorf("holder = %+v; want child on ttyS9, pid %d", holder, cmd.Process.Pid)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	l, holder, err = AcquireConsole(layout, "alice", "tty1")
	if err != nil || l == nil {
		t.Fatalf("AcquireConsole after the holder was killed = %v, %v, %v; want the lock", l, holder, err)
	}
	defer l.Release()
	b, _ := os.ReadFile(filepath.Join(root, "run", "virtcon", ConsoleHolderFile))
	if !strings.Contains(string(b), `"alice"`) {
		t.Errorf("holder record %s; want the dead child's record replaced by alice's", b)
	}
}

func TestHolderString(t *testing.T) {
	since := time.Date(2026, 3, 4, 9, 12, 30, 0, time.Local)
	tests := []struct {
		h    Holder
		want string
	}{
		{Holder{User: "alice", TTY: "tty1", PID: 42, Since: since}, "alice on tty1 since 09:12"},
		{Holder{User: "bob", TTY: "pts/3", Since: since.Add(11 * time.Hour)}, "bob on pts/3 since 20:12"},
		{Holder{User: "carol"}, "carol"},
		{Holder{}, "another console"},
	}
	for _, tt := range tests {
		if got := tt.h.String(); got != tt.want {
			t.Errorf("%+v.String() = %q; want %q", tt.h, got, tt.want)
		}
	}
}
