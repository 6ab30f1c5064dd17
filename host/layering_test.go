package host

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/virtcon/virtcon"

// faces are the packages that translate for a user; everything else in
// the module (but tests, commands and scripts) is the core.
var faces = []string{module + "/cli", module + "/tui"}

// testHelpers are the packages only tests import: neither core nor face,
// they may import what a test needs (testing, a golden-file library).
var testHelpers = []string{module + "/internal/testutil", module + "/internal/pamtest", module + "/tui/tuitest"}

// uiLibraries are what only a face may import.
var uiLibraries = []string{"github.com/spf13/cobra", "github.com/spf13/pflag", "charm.land/", "github.com/charmbracelet/"}

func under(pkg, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

func goTool(t *testing.T) string {
	t.Helper()
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	g, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("needs the go tool to list dependencies: %v", err)
	}
	return g
}

func underAny(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if under(pkg, p) {
			return true
		}
	}
	return false
}

// The core imports no face and no UI library, and the faces import each
// other nowhere: a rule lives once, in the core (issue 10). No program
// links a test helper: only _test.go files import them.
func TestLayering(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-f", "{{.ImportPath}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if underAny(pkg, testHelpers) {
			continue
		}
		deps, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(deps)) {
			if underAny(dep, testHelpers) {
				t.Errorf("package %s depends on the test helper %s", pkg, dep)
			}
		}
		if under(pkg, module+"/cmd") || under(pkg, module+"/integration") || under(pkg, module+"/scripts") {
			continue
		}
		face := ""
		for _, f := range faces {
			if under(pkg, f) {
				face = f
			}
		}
		for _, dep := range strings.Fields(string(deps)) {
			switch {
			case face == "":
				for _, bad := range append(append([]string{}, faces...), uiLibraries...) {
					if under(dep, bad) {
						t.Errorf("core package %s depends on %s", pkg, dep)
					}
				}
			default:
				for _, other := range faces {
					if other != face && under(dep, other) {
						t.Errorf("face %s depends on another face, %s", pkg, dep)
					}
				}
			}
		}
	}
}
