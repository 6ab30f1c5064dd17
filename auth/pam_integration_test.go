//go:build integration

package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/pamtest"
	"github.com/virtcon/virtcon/paths"
)

// TestLoginIntegration logs real Unix users in through the real PAM stack
// with packaging/pam.d/virtcon installed under a test name.
func TestLoginIntegration(t *testing.T) { testLoginIntegration(t, "") }

// TestLoginIntegrationPAMProcess: the same through the PAM helper process
// (this test binary re-executed; TestMain runs reexec.Init).
func TestLoginIntegrationPAMProcess(t *testing.T) { testLoginIntegration(t, os.Args[0]) }

func testLoginIntegration(t *testing.T, pamProcess string) {
	if !PAMAvailable {
		t.Skip("built without cgo: PAM login unavailable")
	}
	pamtest.RequireRootPAM(t)
	service := pamtest.InstallService(t)
	group := pamtest.CreateGroup(t)
	const password = "Corr3ct-h0rse-Battery-staple"
	admin := pamtest.CreateUser(t, password, group)
	outsider := pamtest.CreateUser(t, password)
	expired := pamtest.CreateUser(t, password, group)
	pamtest.ExpireAccount(t, expired)

	layout := paths.New(t.TempDir())
	var logs bytes.Buffer
	a := New(layout, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Options{Service: service, Group: group, PAMProcess: pamProcess})

	tests := []struct {
		name     string
		user, pw string
		want     error // nil: success
	}{
		{"admin group member", admin, password, nil},
		{"wrong password", admin, password + "x", ErrBadCredentials},
		{"unknown user", "vctu-no-such-user", password, ErrBadCredentials},
		{"not in the admin group", outsider, password, ErrNotAdmin},
		{"expired account (AcctMgmt runs)", expired, password, ErrAccount},
	}
	var errs []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id, err := a.Login(ctx, tt.user, tt.pw, "tty1")
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Login(%s) = %v; want success", tt.user, err)
				}
				if id.User != tt.user || id.UID <= 0 || !slices.Contains(id.Groups, group) {
					t.Errorf("Identity = %+v; want %s, a non-root uid, groups with %s", id, tt.user, group)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Login(%s) = %v; want %v", tt.user, err, tt.want)
			}
			errs = append(errs, err.Error())
			if tt.want == ErrNotAdmin && !strings.Contains(err.Error(), group) {
				t.Errorf("error %q does not name the group %s", err, group)
			}
		})
	}

	audit, err := os.ReadFile(filepath.Join(layout.LogDir(), AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	results := []string{}
	for _, r := range readAudit(t, layout) {
		results = append(results, shownAs(r.User)+" "+r.Result)
	}
	want := []string{}
	for _, r := range []string{admin + " success", admin + " bad-credentials", "UNKNOWN bad-credentials", outsider + " not-admin", expired + " account"} {
		u, _, _ := strings.Cut(r, " ")
		want = append(want, u+" attempt", r)
	}
	if !slices.Equal(results, want) {
		t.Errorf("audit %q; want %q", results, want)
	}
	state, _ := os.ReadFile(filepath.Join(layout.RunDir(), "auth-failures.json"))
	for what, text := range map[string]string{"audit log": string(audit), "slog output": logs.String(), "errors": strings.Join(errs, "\n"), "failure state": string(state)} {
		if strings.Contains(text, password) {
			t.Errorf("the password appears in the %s", what)
		}
		// os/user says this name is no account: it is recorded as UNKNOWN.
		if strings.Contains(text, "vctu-no-such-user") {
			t.Errorf("the unknown user name appears in the %s", what)
		}
	}
	t.Logf("audit log:\n%s", audit)
}

// envLoginChild makes the test binary a console that tries a wrong password
// through the PAM helper under the given root (service and user from
// envLoginService, envLoginUser), to be killed while PAM runs.
const (
	envLoginChild   = "VIRTCON_AUTH_TEST_LOGIN"
	envLoginService = "VIRTCON_AUTH_TEST_LOGIN_SERVICE"
	envLoginUser    = "VIRTCON_AUTH_TEST_LOGIN_USER"
)

func init() { testBinaryModes[envLoginChild] = loginChild }

func loginChild(root string) int {
	a := New(paths.New(root), nil, Options{Service: os.Getenv(envLoginService), PAMProcess: os.Args[0]})
	_, err := a.Login(context.Background(), os.Getenv(envLoginUser), "wrong-guess", "ttyS0")
	fmt.Println("login answered:", err)
	return 0
}

// TestLoginIntegrationHangUp: a wrong password makes PAM sleep through its
// fail delay; an attacker on a serial line who hangs up meanwhile kills the
// console, and with it (Pdeathsig) the PAM helper. The guess must have been
// counted and audited before PAM ran. Then the same through a cancelled ctx.
func TestLoginIntegrationHangUp(t *testing.T) {
	if !PAMAvailable {
		t.Skip("built without cgo: PAM login unavailable")
	}
	pamtest.RequireRootPAM(t)
	service := pamtest.InstallService(t)
	group := pamtest.CreateGroup(t)
	user := pamtest.CreateUser(t, "Corr3ct-h0rse-Battery-staple", group)
	root := t.TempDir()
	layout := paths.New(root)
	auditPath := filepath.Join(layout.LogDir(), AuditFile)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envLoginChild+"="+root, envLoginService+"="+service, envLoginUser+"="+user)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The attempt line is written just before PAM is asked.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(auditPath)
		if bytes.Contains(b, []byte(`"result":"attempt"`)) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("no attempt line in the audit log after 10 s; console output: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Kill() // the hang-up: SIGHUP's default action is as final
	<-exited
	if strings.Contains(out.String(), "login answered") {
		t.Skipf("PAM answered within 0.5 s (no fail delay to hang up in): %s", out.String())
	}

	a := New(layout, nil, Options{Service: service, Group: group, PAMProcess: os.Args[0]})
	failures := func() int {
		t.Helper()
		key, err := a.limiter().nameKey(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s, err := a.limiter().read()
		if err != nil {
			t.Fatal(err)
		}
		return s.Records[nameMAC(key, user)].Failures
	}
	if got := failures(); got != 1 {
		t.Errorf("after the console was killed in PAM: %d failures recorded; want 1", got)
	}
	recs := readAudit(t, layout)
	if len(recs) != 1 || recs[0].Result != "attempt" || recs[0].User != user {
		t.Errorf("audit %+v; want the attempt line alone", recs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := a.Login(ctx, user, "wrong-guess", "ttyS0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Login with a deadline in PAM's fail delay = %v; want the deadline", err)
	}
	if time.Since(start) > 1500*time.Millisecond {
		t.Errorf("Login took %v past its 0.5 s deadline", time.Since(start))
	}
	if got := failures(); got != 2 {
		t.Errorf("after a caller gave up in PAM: %d failures recorded; want 2", got)
	}
}

// TestLoginIntegrationRhost: a web login hands PAM its source address as
// PAM_RHOST, so that pam_access's "from" rules apply to it: a rule
// refusing 192.0.2.66 refuses the web login from there (account refused)
// and not one from elsewhere, in this process and through the helper.
func TestLoginIntegrationRhost(t *testing.T) {
	if !PAMAvailable {
		t.Skip("built without cgo: PAM login unavailable")
	}
	pamtest.RequireRootPAM(t)
	const module = "/lib/x86_64-linux-gnu/security/pam_access.so"
	if _, err := os.Stat(module); err != nil {
		t.Skipf("pam_access not installed (libpam-modules): %v", err)
	}
	group := pamtest.CreateGroup(t)
	const password = "Corr3ct-h0rse-Battery-staple"
	user := pamtest.CreateUser(t, password, group)

	access := filepath.Join(t.TempDir(), "access.conf")
	if err := os.WriteFile(access, []byte("-:ALL:192.0.2.66\n+:ALL:ALL\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp("/etc/pam.d", "virtcon-test-rhost-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	stack := "auth required pam_unix.so\n" +
		"account required pam_access.so accessfile=" + access + "\n" +
		"account required pam_unix.so\n"
	if _, err := f.WriteString(stack); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	service := filepath.Base(f.Name())

	for _, proc := range []struct{ name, exe string }{{"in process", ""}, {"helper", os.Args[0]}} {
		t.Run(proc.name, func(t *testing.T) {
			a := New(paths.New(t.TempDir()), nil, Options{Service: service, Group: group, PAMProcess: proc.exe})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := a.Login(ctx, user, password, WebTTY("192.0.2.66")); !errors.Is(err, ErrAccount) {
				t.Errorf("web login from 192.0.2.66, refused by pam_access: %v; want ErrAccount", err)
			}
			if _, err := a.Login(ctx, user, password, WebTTY("192.0.2.67")); err != nil {
				t.Errorf("web login from 192.0.2.67: %v; want success", err)
			}
		})
	}
}
