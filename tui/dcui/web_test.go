package dcui

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/webterm"
)

const webIdentity = `{"user":"alice","uid":1000,"groups":["virtcon-admin"],"source":"192.0.2.7","session":"1a2b3c4d"}`

// identityPipe is a descriptor of its own (the caller's to give away)
// reading a pipe that holds data, its write end closed.
func identityPipe(t *testing.T, data string) int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(data); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer r.Close()
	return dupFD(t, r)
}

// fileFD is a descriptor of its own on a regular file holding data.
func fileFD(t *testing.T, data string) int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return dupFD(t, f)
}

func dupFD(t *testing.T, f *os.File) int {
	t.Helper()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestWebSessionFD: --web-session-fd is honoured only for root, and only
// on a pipe; anything else is refused with the reason.
func TestWebSessionFD(t *testing.T) {
	asRoot := func() int { return 0 }
	tests := []struct {
		name    string
		euid    func() int
		fd      func(t *testing.T) int
		wantErr string
	}{
		{"pipe, root", asRoot, func(t *testing.T) int { return identityPipe(t, webIdentity) }, ""},
		{"regular file", asRoot, func(t *testing.T) int { return fileFD(t, webIdentity) }, "not a pipe"},
		{"not root", func() int { return 1000 }, func(t *testing.T) int { return identityPipe(t, webIdentity) }, "only root"},
		{"the terminal", asRoot, func(*testing.T) int { return 0 }, "descriptors 0-2"},
		{"closed descriptor", asRoot, func(t *testing.T) int { fd := identityPipe(t, ""); unix.Close(fd); return fd }, "bad file descriptor"},
		{"bad identity", asRoot, func(t *testing.T) int { return identityPipe(t, `{"user":"alice"}`) }, "session"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := geteuid
			geteuid = tt.euid
			t.Cleanup(func() { geteuid = old })
			fd := tt.fd(t)
			id, err := webSession(fd)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--web-session-fd "+strconv.Itoa(fd)) {
					t.Fatalf("webSession(%d) = %+v, %v; want refused: %s", fd, id, err, tt.wantErr)
				}
				if tt.name == "not root" {
					unix.Close(fd) // refused before it was read: still ours
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.User != "alice" || id.TTYName() != "web/1a2b3c4d" {
				t.Errorf("identity %+v; want alice on web/1a2b3c4d", id)
			}
			// it was read and closed: the DCUI keeps no descriptor of it
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
				t.Errorf("fd %d still open after the identity was read", fd)
			}
		})
	}
}

// TestWebSessionFDAsRoot: the real check of the effective uid lets root
// through with a pipe.
func TestWebSessionFDAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: --web-session-fd is honoured only when the DCUI runs as root")
	}
	id, err := webSession(identityPipe(t, webIdentity))
	if err != nil || id.User != "alice" {
		t.Fatalf("webSession as root with a pipe = %+v, %v; want alice", id, err)
	}
}

// TestMainRefusesWebSessionFD: refused before anything starts, with exit
// status 2.
func TestMainRefusesWebSessionFD(t *testing.T) {
	fd := fileFD(t, webIdentity)
	defer unix.Close(fd)
	old := os.Args
	os.Args = []string{"dcui", "--root", t.TempDir(), "--web-session-fd", strconv.Itoa(fd)}
	t.Cleanup(func() { os.Args = old })
	if code := Main(context.Background()); code != 2 {
		t.Errorf("Main with --web-session-fd on a regular file = %d; want 2", code)
	}
}

// TestRunWebSession: a web session starts logged in as its user, without
// the login form, takes the console lock as web/<session>, and ends when
// the user logs out, with ErrLoggedOut (Main exits webterm.ExitLoggedOut).
func TestRunWebSession(t *testing.T) {
	master, slave := openPTY(t, 100, 30)
	out := &ptyOutput{}
	go out.copyFrom(master)
	layout := paths.New(t.TempDir())
	hostRoot := fakehost.Tree(t, "pvm-build")
	fakehost.CacheVerdict(t, layout.AccelCacheFile(), hostRoot, hostinfo.AccelCache{Acceleration: hostinfo.AccelTCG, Reason: "cached by the test",
		Probe: &kvmprobe.Result{Stage: kvmprobe.StageOpen, Error: "cached by the test"}})
	h := host.New(host.Options{Layout: layout, HostRoot: hostRoot, Logger: testutil.Logger(t)})
	var id webterm.Identity
	if err := json.Unmarshal([]byte(webIdentity), &id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{In: slave, Out: slave, TERM: "xterm-256color", TTYName: id.TTYName(), Host: h,
			Hostname: "test-host", IdleTimeout: time.Minute, WebSession: &id,
			// PAM must not be asked: the helper would fail loudly
			PAMHelper: "/nonexistent/pam-helper"})
	}()
	// logged in without a form: it takes the console lock as web/<id>
	var holder auth.Holder
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(layout.RunDir(), auth.ConsoleHolderFile))
		if err == nil && json.Unmarshal(b, &holder) == nil {
			break
		}
	}
	if holder.User != "alice" || holder.TTY != "web/1a2b3c4d" {
		t.Fatalf("console lock holder %+v; want alice on web/1a2b3c4d", holder)
	}
	// and says so on the header (the renderer redraws only changed
	// cells, so [RW] may come in a later piece)
	out.waitFor(t, 10*time.Second, "alice@web/1a2b3c4d")
	if _, err := master.Write([]byte("x")); err != nil { // log out
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrLoggedOut) {
			t.Errorf("Run = %v after logout; want ErrLoggedOut (the web terminal ends the whole login)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after the web session's user logged out")
	}
	if _, err := os.Stat(filepath.Join(layout.RunDir(), auth.ConsoleHolderFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("console lock holder record after the session: %v; want released", err)
	}
}
