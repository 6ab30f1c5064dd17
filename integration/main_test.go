//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/reexec"
)

// virtBin and dcuiBin are the binaries built once for all tests, in a
// directory any user may execute from (the non-root tests run virt as
// nobody); `virt dcui` finds dcui next to virt.
var virtBin, dcuiBin string

func TestMain(m *testing.M) {
	reexec.Init() // nothing here re-executes the test binary today; cheap insurance
	dir, err := os.MkdirTemp("", "virtcon-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	virtBin = filepath.Join(dir, "virt")
	build := exec.Command(goTool(), "build", "-o", virtBin, "github.com/virtcon/virtcon/cmd/virt")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building virt:", err)
		os.Exit(1)
	}
	dcuiBin = filepath.Join(dir, "dcui")
	build = exec.Command(goTool(), "build", "-o", dcuiBin, "github.com/virtcon/virtcon/cmd/dcui")
	build.Env = append(os.Environ(), "CGO_ENABLED=1") // PAM
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dcui:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool finds the go command even under sudo's reset PATH.
func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	if g, err := exec.LookPath("go"); err == nil {
		return g
	}
	return "/usr/local/go/bin/go"
}

// needsRoot is why the integration tests need root, said when they skip.
const needsRoot = "the integration tests read root-only sysfs files, open /dev/kvm and switch users"

type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// virt runs the binary; cred, when set, runs it as that uid/gid.
func virt(t *testing.T, cred *syscall.Credential, args ...string) result {
	t.Helper()
	return run(t, cred, virtBin, args...)
}

// virtIn runs the binary inside a network namespace (ip netns exec).
func virtIn(t *testing.T, ns string, args ...string) result {
	t.Helper()
	return run(t, nil, "ip", append([]string{"netns", "exec", ns, virtBin}, args...)...)
}

func run(t *testing.T, cred *syscall.Credential, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("virt %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
