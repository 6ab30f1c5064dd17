package pamtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

// ServiceSource is the PAM service file, relative to the repository root.
const ServiceSource = "packaging/pam.d/virtcon"

// pamDir is where Linux-PAM reads service files.
const pamDir = "/etc/pam.d"

// RequireRootPAM skips t unless it runs as root on a host with a PAM stack
// (/etc/pam.d/common-auth) and the shadow tools to make users.
func RequireRootPAM(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "creates Unix users and groups and installs a PAM service")
	if _, err := os.Stat(filepath.Join(pamDir, "common-auth")); err != nil {
		t.Skipf("no PAM stack: %v (a Debian-style /etc/pam.d/common-auth is needed)", err)
	}
	for _, tool := range []string{"useradd", "userdel", "groupadd", "groupdel", "chpasswd", "usermod"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (apt-get install passwd): %v", tool, err)
		}
	}
}

// InstallService copies the repository's PAM service file to
// /etc/pam.d/virtcon-test-<random> and returns that service name; the file
// is removed when t ends.
func InstallService(t testing.TB) string {
	t.Helper()
	src := filepath.Join(testutil.RepoRoot(t), ServiceSource)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("pam service: %v", err)
	}
	name := "virtcon-test-" + randomHex(t, 4)
	dst := filepath.Join(pamDir, name)
	// O_EXCL: never overwrite a service someone else owns.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("pam service: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pam service cleanup: %v", err)
		}
	})
	if _, err := f.Write(data); err != nil {
		f.Close()
		t.Fatalf("pam service %s: %v", dst, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("pam service %s: %v", dst, err)
	}
	return name
}

// CreateGroup adds a group vctg<random> and returns its name; it is removed
// when t ends.
func CreateGroup(t testing.TB) string {
	t.Helper()
	name := "vctg" + randomHex(t, 4)
	run(t, nil, "groupadd", name)
	t.Cleanup(func() {
		if err := command(nil, "groupdel", name); err != nil {
			t.Errorf("group cleanup: %v", err)
		}
	})
	return name
}

// CreateUser adds a user vctu<random> without a home directory, a login
// shell or a group of its own, sets its password, adds it to groups as
// supplementary groups, and returns its name; it is removed when t ends
// (register the groups' cleanups first, so the user goes before them).
func CreateUser(t testing.TB, password string, groups ...string) string {
	t.Helper()
	if strings.ContainsAny(password, "\n\r\x00") {
		t.Fatal("pamtest: a password cannot contain a newline or NUL (chpasswd reads lines)")
	}
	name := "vctu" + randomHex(t, 4)
	args := []string{"-M", "-N", "-s", "/usr/sbin/nologin"}
	if len(groups) > 0 {
		args = append(args, "-G", strings.Join(groups, ","))
	}
	run(t, nil, "useradd", append(args, name)...)
	t.Cleanup(func() {
		if err := command(nil, "userdel", name); err != nil {
			t.Errorf("user cleanup: %v", err)
		}
	})
	// chpasswd reads "user:password" lines on stdin and hashes per
	// /etc/login.defs; the password never appears in argv or the environment.
	run(t, []byte(name+":"+password+"\n"), "chpasswd")
	return name
}

// ExpireAccount sets user's account expiry date in the past (usermod
// --expiredate 1, 1970-01-02), so PAM's account management refuses it
// while its password still authenticates.
func ExpireAccount(t testing.TB, user string) {
	t.Helper()
	run(t, nil, "usermod", "--expiredate", "1", user)
}

func run(t testing.TB, stdin []byte, name string, args ...string) {
	t.Helper()
	if err := command(stdin, name, args...); err != nil {
		t.Fatal(err)
	}
}

// command runs name with args; stdin is never echoed into the error.
func command(stdin []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random name: %v", err)
	}
	return hex.EncodeToString(b)
}
