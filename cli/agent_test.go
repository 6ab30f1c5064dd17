package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
)

const (
	testSecret = "s3cr3tvalue0123456789abcdefghijk"
	testPin    = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testJoin   = "vcj1:ab12cd34." + testSecret + "@director.example:9443#" + testPin
)

// runIn runs virt with stdin and returns stdout, stderr and the exit code.
func runIn(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}

// fakeEnroll replaces agent.Enroll for the test; it records its calls.
type fakeEnroll struct {
	calls []enroll.Join
	opts  []agent.EnrollOptions
	err   error
}

func (f *fakeEnroll) install(t *testing.T) {
	old := agentEnroll
	agentEnroll = func(ctx context.Context, h *host.Host, j enroll.Join, o agent.EnrollOptions) (*agent.Status, error) {
		f.calls, f.opts = append(f.calls, j), append(f.opts, o)
		if f.err != nil {
			return nil, f.err
		}
		return &agent.Status{Enrolled: true, Director: j.Addr(), NodeID: "0f1e2d3c-4b5a-4697-8877-665544332211", Pin: j.Pin(), State: agent.StateStopped}, nil
	}
	t.Cleanup(func() { agentEnroll = old })
}

// The join string and its token are refused on the command line in every
// form, and the refusal never repeats them.
func TestAgentEnrollRefusesArgv(t *testing.T) {
	f := &fakeEnroll{}
	f.install(t)
	root := t.TempDir()
	tests := []struct {
		name string
		args []string
	}{
		{"--token=", []string{"agent", "enroll", "--token=ab12cd34." + testSecret}},
		{"--token VALUE", []string{"agent", "enroll", "--token", "ab12cd34." + testSecret}},
		{"token flag with a join string", []string{"agent", "enroll", "--token", testJoin}},
		{"positional token", []string{"agent", "enroll", "ab12cd34." + testSecret}},
		{"positional join string", []string{"agent", "enroll", testJoin}},
		{"join string to agent", []string{"agent", testJoin}},
		{"join string as a flag value", []string{"agent", "enroll", "--join-file=" + testJoin}},
		{"join string to the root", []string{testJoin}},
		{"mistyped flag", []string{"agent", "enroll", "--tokn=" + testSecret}},
		{"unknown shorthand", []string{"agent", "enroll", "-t" + testSecret}},
		{"bad value of a bool flag", []string{"agent", "enroll", "--unsafe-skip-ca-pin=" + testSecret}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runIn(t, testJoin, append([]string{"--root", root}, tt.args...)...)
			if code != ExitUsage {
				t.Errorf("exit %d; want %d (stderr %q)", code, ExitUsage, stderr)
			}
			if strings.Contains(stdout+stderr, testSecret) || strings.Contains(stdout+stderr, "vcj1:ab12") {
				t.Errorf("the refusal repeats the secret: stdout %q stderr %q", stdout, stderr)
			}
			if strings.HasPrefix(tt.name, "--token") && !strings.Contains(stderr, "--token: the join string is never taken from the command line") {
				t.Errorf("stderr %q: want --token refused as the command line", stderr)
			}
			if stderr == "" {
				t.Errorf("no word on stderr")
			}
		})
	}
	if len(f.calls) != 0 {
		t.Errorf("enrolment ran %d times; want none", len(f.calls))
	}
}

func TestAgentEnrollStdin(t *testing.T) {
	f := &fakeEnroll{}
	f.install(t)
	stdout, stderr, code := runIn(t, "  "+testJoin+"\n", "--root", t.TempDir(), "agent", "enroll", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(f.calls) != 1 || f.calls[0].Token() != "ab12cd34."+testSecret || f.calls[0].Addr() != "director.example:9443" || f.opts[0].UnsafeSkipPin {
		t.Fatalf("enrolled with %v %+v; want the join string from stdin, pinned", f.calls, f.opts)
	}
	if !strings.Contains(stdout, `"enrolled": true`) || !strings.Contains(stdout, `"director": "director.example:9443"`) {
		t.Errorf("stdout %q: want the status as JSON", stdout)
	}
	if strings.Contains(stdout+stderr, testSecret) {
		t.Errorf("output repeats the secret: %q %q", stdout, stderr)
	}
	if !strings.Contains(stderr, "virtcon-agent.service") {
		t.Errorf("stderr %q: want the next step (start the agent)", stderr)
	}
}

// The join file is deleted after a successful enrolment, and kept after
// a failed one (to retry).
func TestAgentEnrollJoinFile(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		code     int
		fileGone bool
	}{
		{"success", nil, ExitOK, true},
		{"refused", fmt.Errorf("enrol: %w", agent.ErrTokenRefused), ExitError, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEnroll{err: tt.err}
			f.install(t)
			dir := t.TempDir()
			file := filepath.Join(dir, "join.txt")
			if err := os.WriteFile(file, []byte(testJoin+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, code := runIn(t, "", "--root", dir, "agent", "enroll", "--join-file", file)
			if code != tt.code {
				t.Fatalf("exit %d; want %d (%s)", code, tt.code, stderr)
			}
			_, err := os.Stat(file)
			if gone := os.IsNotExist(err); gone != tt.fileGone {
				t.Errorf("join file gone: %v; want %v", gone, tt.fileGone)
			}
			if len(f.calls) != 1 || f.calls[0].ID() != "ab12cd34" {
				t.Errorf("calls %v; want one with the file's join string", f.calls)
			}
		})
	}
}

func TestAgentEnrollInput(t *testing.T) {
	noPin := strings.SplitN(testJoin, "#", 2)[0]
	tests := []struct {
		name, stdin string
		args        []string
		code        int
		want        string
		calls       int
	}{
		{"no pin refused", noPin, nil, ExitUsage, "no pin", 0},
		{"no pin with the unsafe flag", noPin, []string{"--unsafe-skip-ca-pin"}, ExitOK, "", 1},
		{"empty stdin", "\n", nil, ExitUsage, "no join string in stdin", 0},
		{"malformed", "vcj1:ab12cd34." + testSecret + "x@h:1", nil, ExitUsage, "secret: want 32 characters", 0},
		{"no such join file", "", []string{"--join-file", "/nonexistent/join"}, ExitUsage, "--join-file", 0},
		{"too long", strings.Repeat("x", maxJoinLen+1), nil, ExitUsage, "over 4096 bytes", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEnroll{}
			f.install(t)
			_, stderr, code := runIn(t, tt.stdin, append([]string{"--root", t.TempDir(), "agent", "enroll"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) || len(f.calls) != tt.calls {
				t.Errorf("exit %d, %d calls, %q; want %d, %d calls, saying %q", code, len(f.calls), stderr, tt.code, tt.calls, tt.want)
			}
			if strings.Contains(stderr, testSecret) {
				t.Errorf("stderr repeats the secret: %q", stderr)
			}
			if tt.calls == 1 && !f.opts[0].UnsafeSkipPin {
				t.Errorf("--unsafe-skip-ca-pin not passed on")
			}
		})
	}
}

// Revoked or expired is exit 5, from run and from status; the words say
// what to do.
func TestAgentExitCodes(t *testing.T) {
	for _, err := range []error{agent.ErrRevoked, agent.ErrExpired, fmt.Errorf("director d, node n: %w: certificate revoked", agent.ErrRevoked)} {
		if got := ExitCode(err); got != ExitCredential {
			t.Errorf("ExitCode(%v) = %d; want %d", err, got, ExitCredential)
		}
	}
	old := agentRun
	t.Cleanup(func() { agentRun = old })
	agentRun = func(ctx context.Context, h *host.Host, o agent.RunOptions) error {
		return fmt.Errorf("director d, node n: %w: certificate revoked", agent.ErrRevoked)
	}
	_, stderr, code := runIn(t, "", "--root", t.TempDir(), "--log-level", "error", "agent", "run")
	if code != ExitCredential || !strings.Contains(stderr, "VMs are untouched; enrol again") {
		t.Errorf("run, revoked: exit %d %q; want 5 saying VMs are untouched and to enrol again", code, stderr)
	}
	agentRun = func(ctx context.Context, h *host.Host, o agent.RunOptions) error { return nil }
	if _, stderr, code := runIn(t, "", "--root", t.TempDir(), "agent", "run"); code != ExitOK {
		t.Errorf("run stopped by a signal: exit %d (%s); want 0", code, stderr)
	}
	agentRun = func(ctx context.Context, h *host.Host, o agent.RunOptions) error {
		return fmt.Errorf("agent: %w", agent.ErrNotEnrolled)
	}
	if _, stderr, code := runIn(t, "", "--root", t.TempDir(), "agent", "run"); code != ExitError || !strings.Contains(stderr, "virt agent enroll") {
		t.Errorf("run, not enrolled: exit %d %q; want 1 naming virt agent enroll", code, stderr)
	}
}

func TestAgentStatusNotEnrolled(t *testing.T) {
	root := t.TempDir()
	stdout, stderr, code := runIn(t, "", "--root", root, "agent", "status", "-o", "json")
	if code != ExitOK || strings.TrimSpace(stdout) != "{\n  \"enrolled\": false,\n  \"running\": false\n}" {
		t.Errorf("status -o json: exit %d, %q %q", code, stdout, stderr)
	}
	stdout, _, code = runIn(t, "", "--root", root, "agent", "status")
	if code != ExitOK || !strings.Contains(stdout, "Enrolled:  no") {
		t.Errorf("status: exit %d, %q", code, stdout)
	}
	if _, stderr, code := runIn(t, "", "--root", root, "agent", "config-check"); code != ExitError || !strings.Contains(stderr, "not enrolled") {
		t.Errorf("config-check, not enrolled: exit %d %q", code, stderr)
	}
}

func TestAgentLeaveWords(t *testing.T) {
	old := agentLeave
	t.Cleanup(func() { agentLeave = old })
	var gotLocal []bool
	agentLeave = func(ctx context.Context, h *host.Host, local bool) error {
		gotLocal = append(gotLocal, local)
		if !local {
			return errors.New("leave director d: unavailable: connection refused")
		}
		return nil
	}
	root := t.TempDir()
	if _, stderr, code := runIn(t, "", "--root", root, "agent", "leave"); code != ExitError || !strings.Contains(stderr, "--local") {
		t.Errorf("leave, director down: exit %d %q; want 1 pointing at --local", code, stderr)
	}
	if _, stderr, code := runIn(t, "", "--root", root, "agent", "leave", "--local"); code != ExitOK || !strings.Contains(stderr, "credentials deleted") {
		t.Errorf("leave --local: exit %d %q", code, stderr)
	}
	if len(gotLocal) != 2 || gotLocal[0] || !gotLocal[1] {
		t.Errorf("leave calls %v; want [false true]", gotLocal)
	}
}
