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
var testHelpers = []string{module + "/internal/testutil", module + "/internal/pamtest", module + "/tui/tuitest", module + "/director/directortest", module + "/director/etcdstore/etcdtest"}

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
// links a test helper: only _test.go files import them. A UI library
// that only a third-party module links is not the core using one (etcd's
// embed, under director/, pulls in pflag): the rule is on the module's
// own imports along the way.
func TestLayering(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkgs = append(pkgs, f[0])
		imports[f[0]] = f[1:]
	}
	for _, pkg := range pkgs {
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
				for _, bad := range faces {
					if under(dep, bad) {
						t.Errorf("core package %s depends on %s", pkg, dep)
					}
				}
				for _, imp := range imports[dep] {
					if underAny(imp, uiLibraries) {
						t.Errorf("core package %s depends on %s (through %s)", pkg, imp, dep)
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

// listDeps is every package pkgs depend on, themselves included.
func listDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command(goTool(t), append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

// The agent stays small (issue 13): virt and dcui, and everything they
// link (cli, tui, host, agent, ...), carry protobuf and connect for the
// director protocol but neither etcd nor the director itself.
func TestAgentLinksNoDirector(t *testing.T) {
	roots := []string{module + "/cmd/virt", module + "/cmd/dcui", module + "/cli", module + "/tui/...", module + "/host"}
	var bad []string
	for _, dep := range listDeps(t, roots...) {
		if underAny(dep, []string{"go.etcd.io/", module + "/director", module + "/cli/directorcli"}) {
			bad = append(bad, dep)
		}
	}
	if len(bad) > 0 {
		t.Errorf("virt or dcui links %d packages only virt-director may: %s", len(bad), strings.Join(bad, ", "))
	}
}

// The director never imports the host core nor a host face: it runs on a
// machine that is no KVM host, and what it knows of hosts comes over the
// protocol. enroll, shared by agent and director, imports neither side.
func TestDirectorImportsNoHostCore(t *testing.T) {
	hostSide := []string{"host", "vm", "netcfg", "hostinfo", "auth", "qmp", "systemd", "power", "diag", "webterm", "cli", "tui", "agent"}
	for _, root := range []string{module + "/director/...", module + "/enroll"} {
		for _, dep := range listDeps(t, root) {
			for _, bad := range hostSide {
				if under(dep, module+"/"+bad) {
					t.Errorf("%s depends on %s", root, dep)
				}
			}
		}
	}
}
