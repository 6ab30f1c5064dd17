package netcfg

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/reexec"
)

// testChildMains are the test-only modes in which the test binary runs as
// a child of a test, by the environment variable that selects them;
// integration tests add theirs in init. virtcon's own child modes (the
// watchdog of a try a test starts, the DHCP client Apply starts) are
// reexec's.
var testChildMains = map[string]func(){}

func TestMain(m *testing.M) {
	reexec.Init()
	for env, main := range testChildMains {
		if _, ok := os.LookupEnv(env); ok {
			main()
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

// tryTestWatchdogs lists the live watchdogs of the record at path.
func tryTestWatchdogs(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append([]byte{0}, env...), []byte("\x00"+WatchdogEnv+"="+path+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// tryTestNoWatchdogWithin fails unless every watchdog of path is gone
// within d; it kills any left at the end of the test either way.
func tryTestNoWatchdogWithin(t *testing.T, path string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(tryTestWatchdogs(path)) > 0 {
		if time.Now().After(deadline) {
			t.Errorf("watchdog(s) %v of %s still running after %v", tryTestWatchdogs(path), path, d)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryTestKillWatchdogs is a cleanup: no test leaves a watchdog behind.
func tryTestKillWatchdogs(t *testing.T, path string) {
	t.Cleanup(func() {
		for _, pid := range tryTestWatchdogs(path) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

func TestWatchdogEnviron(t *testing.T) {
	t.Setenv(WatchdogEnv, "/old/pending.json")
	t.Setenv(wdIDEnv, "old")
	env := wdEnviron("/new/pending.json", "abc")
	var got []string
	for _, kv := range env {
		if bytes.HasPrefix([]byte(kv), []byte(WatchdogEnv)) {
			got = append(got, kv)
		}
	}
	want := []string{WatchdogEnv + "=/new/pending.json", wdIDEnv + "=abc", wdReadyEnv + "=3"}
	if len(got) != len(want) {
		t.Fatalf("got %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %q; want %q", got, want)
		}
	}
}
