package pamtest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

func TestServiceSourceExists(t *testing.T) {
	if _, err := os.Stat(filepath.Join(testutil.RepoRoot(t), ServiceSource)); err != nil {
		t.Errorf("the PAM service file InstallService copies is missing: %v", err)
	}
}

// The shipped service authenticates and checks the account through the
// host's common stacks, and nothing else that could lock admins out.
func TestServiceFile(t *testing.T) {
	f, err := os.Open(filepath.Join(testutil.RepoRoot(t), ServiceSource))
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
