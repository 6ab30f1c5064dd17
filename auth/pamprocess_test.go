package auth

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/reexec"
)

// TestProcessPAMBrokenHelper: a helper that answers nothing is a failure
// of the machinery, named as such, never a success.
func TestProcessPAMBrokenHelper(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "helper")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho oops >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := processPAM(exe)(context.Background(), "virtcon", "alice", "pw", "tty1")
	if err == nil || errors.Is(err, ErrBadCredentials) || !strings.Contains(err.Error(), "no answer") || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("got %v; want a 'no answer' error with the helper's stderr", err)
	}
}

// TestProcessPAMAnswers: the child's classified answers come back as the
// same errors Login branches on, and the password travels on stdin only.
func TestProcessPAMAnswers(t *testing.T) {
	tests := []struct {
		answer string
		want   error
	}{
		{`{"ok":true}`, nil},
		{`{"kind":"bad-credentials","step":"authenticate","status":"Authentication failure"}`, ErrBadCredentials},
		{`{"kind":"account","step":"account","status":"User account has expired","messages":["expired"]}`, ErrAccount},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		exe := filepath.Join(dir, "helper")
		got := filepath.Join(dir, "stdin")
		script := "#!/bin/sh\ncat > " + got + "\nenv > " + got + ".env\necho '" + tt.answer + "'\n"
		if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		err := processPAM(exe)(context.Background(), "virtcon", "alice", "s3cret-pw", "tty1")
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: got %v; want success", tt.answer, err)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("%s: got %v; want %v", tt.answer, err, tt.want)
		}
		in, _ := os.ReadFile(got)
		env, _ := os.ReadFile(got + ".env")
		if !bytes.Contains(in, []byte("s3cret-pw")) {
			t.Errorf("the helper's stdin lacks the password: %q", in)
		}
		if bytes.Contains(env, []byte("s3cret-pw")) || !bytes.Contains(env, []byte(reexec.Env+"="+pamHelperMode)) {
			t.Errorf("helper environment wrong: %q", env)
		}
	}
}
