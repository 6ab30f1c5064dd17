package webterm

import (
	"os/exec"
	"strings"
	"testing"
)

// The web terminal is core: it runs the DCUI as a separate process and
// must reach no face (tui, cli) nor a UI library, however indirectly.
func TestImportsNoFace(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("needs the go tool to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/virtcon/virtcon/tui", "github.com/virtcon/virtcon/cli", "charm.land/", "github.com/charmbracelet/", "github.com/spf13/cobra"} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad)) {
				t.Errorf("webterm depends on %s", dep)
			}
		}
	}
}
