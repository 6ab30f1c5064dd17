//go:build integration

package auth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
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
// (this test binary re-executed; TestMain runs MaybeRunPAMHelper).
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
		results = append(results, r.Result)
	}
	if want := []string{"success", "bad-credentials", "bad-credentials", "not-admin", "account"}; !slices.Equal(results, want) {
		t.Errorf("audit results %v; want %v", results, want)
	}
	for what, text := range map[string]string{"audit log": string(audit), "slog output": logs.String(), "errors": strings.Join(errs, "\n")} {
		if strings.Contains(text, password) {
			t.Errorf("the password appears in the %s", what)
		}
	}
	t.Logf("audit log:\n%s", audit)
}
