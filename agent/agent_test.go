package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readOnlyVM are the only methods of the VM manager the agent may call:
// it never starts, stops or deletes a VM (a revoked node, a dead
// director touch none), and the director has no way to make it.
var readOnlyVM = map[string]bool{"List": true}

// execFuncs start programs.
var execFuncs = map[string]bool{"syscall.Exec": true, "syscall.ForkExec": true, "syscall.StartProcess": true,
	"os.StartProcess": true, "unix.Exec": true}

// The agent's code calls no mutating VM method, runs no command (no
// os/exec, no exec call) and reaches no power service: checked in its
// source, so that a later change that would needs this test changed too.
func TestNoVMMutationNoExec(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			switch p := strings.Trim(imp.Path.Value, `"`); p {
			case "os/exec", "github.com/virtcon/virtcon/power", "github.com/virtcon/virtcon/netcfg":
				t.Errorf("%s imports %s", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && execFuncs[id.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: calls %s.%s", fset.Position(sel.Pos()), id.Name, sel.Sel.Name)
			}
			// h.VMs.X, r.view.h.VMs.X, ...: X must be read-only
			if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "VMs" && !readOnlyVM[sel.Sel.Name] {
				t.Errorf("%s: calls VMs.%s; the agent only reads VMs (%v)", fset.Position(sel.Pos()), sel.Sel.Name, readOnlyVM)
			}
			if inner, ok := sel.X.(*ast.SelectorExpr); ok && (inner.Sel.Name == "Power" || inner.Sel.Name == "Net") {
				t.Errorf("%s: uses %s.%s; the agent changes nothing on the host", fset.Position(sel.Pos()), inner.Sel.Name, sel.Sel.Name)
			}
			return true
		})
	}
}
