package api

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// wantProtoc is the protoc the committed code was generated with: its
// version is in every generated file's header.
const wantProtoc = "libprotoc 3.21.12"

// The committed generated code is what scripts/proto.sh makes from the
// .proto files now: a .proto edited without `make proto` fails here, as
// does a generated file no .proto produces. Without protoc 3.21.12 it
// skips, except under CI (which installs it), where it fails.
func TestGeneratedCodeIsFresh(t *testing.T) {
	out, err := exec.Command("protoc", "--version").Output()
	if v := strings.TrimSpace(string(out)); err != nil || v != wantProtoc {
		msg := "needs protoc (" + wantProtoc + ", Debian's protobuf-compiler) to regenerate the API code; have " + strings.TrimSpace(v)
		if err != nil {
			msg += " (" + err.Error() + ")"
		}
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tmp := t.TempDir()
	cmd := exec.Command("sh", "../scripts/proto.sh", tmp)
	cmd.Env = append(os.Environ(), "PROTO_TOOLS="+filepath.Join(tmp, ".tools"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/proto.sh: %v\n%s", err, b)
	}
	fresh := generated(t, filepath.Join(tmp, "api"))
	committed := generated(t, ".")
	for name, want := range fresh {
		got, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("api/%s is missing: run make proto", name)
		case !bytes.Equal(got, want):
			t.Errorf("api/%s is stale: run make proto", name)
		}
	}
	for name := range committed {
		if _, ok := fresh[name]; !ok {
			t.Errorf("api/%s is generated code that no .proto makes: remove it", name)
		}
	}
}

// generated reads the generated Go files under dir, keyed by their path
// relative to it.
func generated(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".tools" {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".pb.go") || strings.HasSuffix(p, ".connect.go")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
