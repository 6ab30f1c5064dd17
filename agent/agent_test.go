package agent

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// readOnlyVM are the VM manager's methods that change nothing: anything
// of the agent may call them (reports, inventory, a task's result).
var readOnlyVM = map[string]bool{"List": true, "Peek": true, "Get": true, "ListImages": true}

// mutatorFiles are the only files that may call a mutating VM method or
// any network method.
var mutatorFiles = map[string]bool{"task_exec.go": true, "task_network.go": true}

// execFuncs start programs.
var execFuncs = map[string]bool{"syscall.Exec": true, "syscall.ForkExec": true, "syscall.StartProcess": true,
	"os.StartProcess": true, "golang.org/x/sys/unix.Exec": true}

const (
	vmPkg     = "github.com/virtcon/virtcon/vm"
	netcfgPkg = "github.com/virtcon/virtcon/netcfg"
	powerPkg  = "github.com/virtcon/virtcon/power"
)

// The agent changes a VM or the host network only in a typed task: a
// mutating method of the VM manager and any method of the network service
// are called only in task_exec.go or task_network.go, and only inside
// functions reached from (*taskRunner).exec, whose switch is over the
// Task oneof (so a revoked credential, a dead director or anything
// outside a task touches nothing). It runs no command (no os/exec, no
// exec call) and never reaches the power service. Checked on the
// type-checked source, so that calls through any field or variable are
// seen; a change that breaks the rule needs this test changed too.
func TestMutationsOnlyInTasks(t *testing.T) {
	fset, files, info := typeCheckAgent(t)
	// the functions reached from exec, by their declarations' bodies
	decls := map[*types.Func]*ast.FuncDecl{}
	var exec *types.Func
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			fn, _ := info.Defs[fd.Name].(*types.Func)
			if fn == nil {
				continue
			}
			decls[fn] = fd
			if fd.Name.Name == "exec" && fd.Recv != nil && strings.Contains(types.ExprString(fd.Recv.List[0].Type), "taskRunner") {
				exec = fn
			}
		}
	}
	if exec == nil {
		t.Fatal("no (*taskRunner).exec")
	}
	reached := map[*ast.FuncDecl]bool{}
	var walk func(fd *ast.FuncDecl)
	walk = func(fd *ast.FuncDecl) {
		if reached[fd] {
			return
		}
		reached[fd] = true
		ast.Inspect(fd, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if fn, ok := info.Uses[id].(*types.Func); ok {
					if d := decls[fn.Origin()]; d != nil {
						walk(d)
					}
				}
			}
			return true
		})
	}
	walk(decls[exec])

	var mutatorUses int
	for _, f := range files {
		name := filepath.Base(fset.Position(f.Pos()).Filename)
		for _, imp := range f.Imports {
			switch p := strings.Trim(imp.Path.Value, `"`); {
			case p == "os/exec", p == powerPkg:
				t.Errorf("%s imports %s", name, p)
			case p == netcfgPkg && name != "taskerr.go" && !mutatorFiles[name]:
				t.Errorf("%s imports %s; only task_network.go (and taskerr.go for its errors) may", name, p)
			}
		}
		for _, d := range f.Decls {
			fd, _ := d.(*ast.FuncDecl)
			ast.Inspect(d, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if fn, ok := info.Uses[n].(*types.Func); ok && fn.Pkg() != nil && execFuncs[fn.Pkg().Path()+"."+fn.Name()] {
						t.Errorf("%s: calls %s.%s", fset.Position(n.Pos()), fn.Pkg().Path(), fn.Name())
					}
				case *ast.SelectorExpr:
					sel := info.Selections[n]
					if sel == nil {
						return true
					}
					recv := namedOf(sel.Recv())
					if recv == "" {
						return true
					}
					if strings.HasPrefix(recv, powerPkg+".") || (sel.Kind() == types.FieldVal && n.Sel.Name == "Power" && recv == "github.com/virtcon/virtcon/host.Host") {
						t.Errorf("%s: uses %s.%s; the agent never reaches the power service", fset.Position(n.Pos()), recv, n.Sel.Name)
						return true
					}
					if sel.Kind() != types.MethodVal {
						return true
					}
					mutating := (recv == vmPkg+".Manager" && !readOnlyVM[n.Sel.Name]) || recv == netcfgPkg+".Service"
					if !mutating {
						return true
					}
					mutatorUses++
					switch {
					case !mutatorFiles[name]:
						t.Errorf("%s: calls %s.%s outside task_exec.go and task_network.go", fset.Position(n.Pos()), recv, n.Sel.Name)
					case fd == nil || !reached[fd]:
						t.Errorf("%s: calls %s.%s in a function not reached from (*taskRunner).exec", fset.Position(n.Pos()), recv, n.Sel.Name)
					}
				}
				return true
			})
		}
	}
	// the check sees the kinds' calls at all (a rename would blind it)
	if mutatorUses < 6 {
		t.Errorf("%d mutating calls found; want the kinds' (create, start, stop, reboot, delete, pull at least)", mutatorUses)
	}
}

// namedOf is "pkgpath.Name" of a (pointer to a) named type, else "".
func namedOf(typ types.Type) string {
	if p, ok := typ.(*types.Pointer); ok {
		typ = p.Elem()
	}
	n, ok := typ.(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return ""
	}
	return n.Obj().Pkg().Path() + "." + n.Obj().Name()
}

// typeCheckAgent type-checks the package's non-test files against the
// export data of its dependencies (from the build cache, by go list).
func typeCheckAgent(t *testing.T) (*token.FileSet, []*ast.File, *types.Info) {
	t.Helper()
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out, err := exec.Command(gobin, "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, e, ok := strings.Cut(line, "="); ok && e != "" {
			exports[p] = e
		}
	}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		e, ok := exports[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(e)
	})
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	if _, err := (&types.Config{Importer: imp}).Check("github.com/virtcon/virtcon/agent", fset, files, info); err != nil {
		t.Fatalf("type-check the agent: %v", err)
	}
	return fset, files, info
}
