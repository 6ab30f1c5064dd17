package webterm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// pipeWith is the read end of a pipe holding data, its write end closed.
func pipeWith(t *testing.T, data string) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(data); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return r
}

func TestReadIdentity(t *testing.T) {
	good := `{"user":"alice","uid":1000,"groups":["users","virtcon-admin"],"source":"192.0.2.7","session":"1a2b3c4d"}`
	id, err := ReadIdentity(pipeWith(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if id.User != "alice" || id.UID != 1000 || len(id.Groups) != 2 || id.Source != "192.0.2.7" || id.TTYName() != "web/1a2b3c4d" {
		t.Errorf("identity %+v", id)
	}

	tests := []struct{ name, data, want string }{
		{"not JSON", "alice", "invalid character"},
		{"unknown field", `{"user":"alice","session":"ab","password":"x"}`, "unknown field"},
		{"no user", `{"user":"","session":"ab"}`, "user"},
		{"control in user", `{"user":"al\u001bice","session":"ab"}`, "user"},
		{"negative uid", `{"user":"alice","uid":-1,"session":"ab"}`, "uid -1"},
		{"session not hex", `{"user":"alice","session":"../x"}`, "session"},
		{"too long", `{"user":"` + strings.Repeat("a", 5000) + `","session":"ab"}`, "longer than"},
	}
	for _, tt := range tests {
		if _, err := ReadIdentity(pipeWith(t, tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error saying %q", tt.name, err, tt.want)
		}
	}

	// a regular file is refused however good its content
	path := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIdentity(f); !errors.Is(err, ErrNotPipe) {
		t.Errorf("from a file: %v; want ErrNotPipe", err)
	}
	// so is a named FIFO (mkfifo), which anyone allowed in its directory
	// could open and fill
	fifo := filepath.Join(t.TempDir(), "identity.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.WriteString(good)
			w.Close()
		}
	}()
	ff, err := os.Open(fifo) // blocks until the writer opens it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIdentity(ff); !errors.Is(err, ErrNotPipe) {
		t.Errorf("from a named FIFO: %v; want ErrNotPipe", err)
	}
	dn, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIdentity(dn); !errors.Is(err, ErrNotPipe) {
		t.Errorf("from %s: %v; want ErrNotPipe", os.DevNull, err)
	}
}
