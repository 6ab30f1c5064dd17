package pamtest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Errorf("RepoRoot() = %s without go.mod: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, ServiceSource)); err != nil {
		t.Errorf("the PAM service file InstallService copies is missing: %v", err)
	}
}

// The shipped service authenticates and checks the account through the
// host's common stacks, and nothing else that could lock admins out.
func TestServiceFile(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, ServiceSource))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.Join(strings.Fields(sc.Text()), " ")
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	want := []string{
		"auth optional pam_faildelay.so delay=2000000",
		"@include common-auth",
		"@include common-account",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("service file rules:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
