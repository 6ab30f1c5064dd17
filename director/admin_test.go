package director_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/internal/testutil"
)

// childSocketEnv makes the test binary, run as a child, call the admin
// socket it names and print the outcome.
const childSocketEnv = "VIRTCON_DIRECTORTEST_ADMIN_SOCKET"

func init() {
	sock := os.Getenv(childSocketEnv)
	if sock == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := director.AdminClient(sock).ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))
	switch {
	case err == nil:
		fmt.Println("result: ok")
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		fmt.Println("result: permission_denied")
	default:
		fmt.Println("result: error:", err)
	}
	os.Exit(0)
}

// Another user is refused on the admin socket: by the socket's mode, and,
// with the mode opened up, by the peer credentials check.
func TestAdminSocketRefusesOtherUser(t *testing.T) {
	testutil.RequireRoot(t, "runs a client as the user nobody")
	h := directortest.Start(t)
	st, err := os.Stat(h.D.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("admin socket mode %o, want 600", m)
	}
	// The child is this test binary, copied where nobody may run it.
	if err := os.Chmod(h.DataDir, 0o711); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(h.DataDir, "child.test")
	copyFile(t, os.Args[0], bin)
	run := func() string {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), childSocketEnv+"="+h.D.AdminSocket())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child as nobody: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "result: error:") || !strings.Contains(out, "permission denied") {
		t.Errorf("nobody on the 0600 socket: %q, want a connect error (permission denied)", out)
	}
	if err := os.Chmod(h.D.AdminSocket(), 0o666); err != nil {
		t.Fatal(err)
	}
	if out := run(); !strings.Contains(out, "result: permission_denied") {
		t.Errorf("nobody on a 0666 socket: %q, want PermissionDenied from the peer check", out)
	}
	var denied []string
	for _, e := range h.Audit(t) {
		if e.GetKind() == "admin.deny" {
			denied = append(denied, e.GetActor())
		}
	}
	if len(denied) != 1 || denied[0] != "nobody" {
		t.Errorf("admin.deny actors %q, want [nobody]", denied)
	}
	// Root (this process) is let in, and named as the creator.
	h.Token(t, nil)
	toks, err := h.Admin.ListTokens(context.Background(), connect.NewRequest(&directorv1.ListTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := toks.Msg.GetTokens()[0].GetCreatedBy(); got != "root" {
		t.Errorf("created_by %q, want root", got)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
