package tui

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/virtcon/virtcon/"

// screens are the DCUI's pages: each is its own package, and none reaches
// into another (what two need is in the core, or in tui/common).
var screens = map[string]bool{
	"tui/status": true, "tui/vms": true, "tui/network": true, "tui/hardware": true,
	"tui/logs": true, "tui/diagnostics": true, "tui/power": true, "tui/director": true,
}

// forbidden are calls no code under tui/ makes: the session's ctx
// (common.Common.Ctx) is every command's parent, so ending a session
// cancels what it has in flight; the services come from host.New, built
// once per process, never per screen.
var forbidden = map[string]string{
	"context.Background":   "derive from the session's ctx (common.Common.Ctx)",
	"context.TODO":         "derive from the session's ctx (common.Common.Ctx)",
	"vm.NewManager":        "use the host's VM manager (host.Host.VMs)",
	"netcfg.NewService":    "use the host's network service (host.Host.Net)",
	"hostinfo.NewAssessor": "use the host's assessor (host.Host.Info)",
	"diag.NewService":      "use the host's diagnostics (host.Host.Diag)",
	"power.NewService":     "use the host's power service (host.Host.Power)",
	"auth.New":             "use host.Host.Auth",
	// the program builds the host once per session (tui/dcui); screens get it
	"host.New": "take the services from the session (tui/dcui builds them)",
}

// builders are the packages whose constructors forbidden names.
var builders = map[string]bool{
	"context": true, module + "vm": true, module + "netcfg": true, module + "hostinfo": true,
	module + "diag": true, module + "power": true, module + "auth": true, module + "host": true,
}

// TestLayering walks the non-test Go files under tui/.
func TestLayering(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := path.Join("tui", filepath.ToSlash(filepath.Dir(p)))
		// the local name of each imported package (its last element
		// unless renamed)
		local := map[string]string{}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			name := path.Base(ip)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			local[name] = ip
			if rel, ok := strings.CutPrefix(ip, module); ok && screens[pkg] && screens[rel] && rel != pkg {
				t.Errorf("%s imports %s: a screen does not import another screen", p, rel)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			ip, ok := local[x.Name]
			if !ok {
				return true
			}
			name := path.Base(ip) + "." + sel.Sel.Name
			if !builders[ip] || (name == "host.New" && pkg == "tui/dcui") {
				return true
			}
			if why, bad := forbidden[name]; bad {
				t.Errorf("%s: %s: %s", fset.Position(sel.Pos()), name, why)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
