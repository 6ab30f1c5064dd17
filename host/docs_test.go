package host

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every package says what it owns and must not touch in one place, its
// doc.go, and docs/development.md's layout table names it (issue 10).
func TestEveryPackageDocumented(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-f", "{{.ImportPath}} {{.Dir}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	layout, err := os.ReadFile(filepath.Join("..", "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list named %d packages; want the module's", len(lines))
	}
	for _, l := range lines {
		pkg, dir, _ := strings.Cut(l, " ")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if !strings.Contains(string(layout), "`"+rel+"`") && !strings.Contains(string(layout), "`"+rel+"/`") {
			t.Errorf("docs/development.md's layout table does not name %s", rel)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		var commented []string
		for _, f := range files {
			ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if ast.Doc != nil {
				commented = append(commented, filepath.Base(f))
			}
		}
		if len(commented) != 1 || commented[0] != "doc.go" {
			t.Errorf("%s: package comment in %v; want it in doc.go alone", rel, commented)
		}
	}
}
