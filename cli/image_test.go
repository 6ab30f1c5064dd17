package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// imageRoot is a --root holding one image (its marker records the sizes,
// so no qemu-img is needed), the partial file of an interrupted pull and
// an image file without a marker.
func imageRoot(t *testing.T) (root, images string) {
	t.Helper()
	root = t.TempDir()
	images = filepath.Join(root, "var/lib/virtcon/images")
	if err := os.MkdirAll(images, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"debian-12.img":        strings.Repeat("x", 3<<20),
		"debian-12.img.sha256": `{"name":"debian-12","format":"qcow2","sha256":"` + strings.Repeat("ab", 32) + `","sizeBytes":3145728,"virtualSizeBytes":2147483648,"source":"https://example.com/d.qcow2","addedAt":"2025-01-02T03:04:05Z"}`,
		".half.img.partial":    "half",
		"lone.img":             "lone",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(images, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, images
}

func TestImageList(t *testing.T) {
	root, images := imageRoot(t)
	out, errOut, code := run(t, "--root", root, "image", "list")
	if code != ExitOK {
		t.Fatalf("image list: exit %d, stderr %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"NAME", "CLASS", "FORMAT", "VIRTUAL", "ALLOCATED", "USED BY", "SHA256", "PATH"},
		{"debian-12", "MANAGED", "qcow2", "2 GiB", "3 MiB", "-", "abababababab", filepath.Join(images, "debian-12.img")},
		{"half", "ORPHANED", "-", "?", "", "-", "-", filepath.Join(images, ".half.img.partial")},
		{"lone", "ORPHANED", "-", "?", "", "-", "-", filepath.Join(images, "lone.img")},
	}
	if len(lines) != len(want) {
		t.Fatalf("image list: got\n%s\nwant %d lines", out, len(want))
	}
	for i, w := range want {
		for _, cell := range w {
			if !strings.Contains(lines[i], cell) {
				t.Errorf("line %d %q: want %q in it", i, lines[i], cell)
			}
		}
		if strings.HasPrefix(lines[i], "-") {
			t.Errorf("line %d %q: a row without a name", i, lines[i])
		}
	}
	if !strings.Contains(errOut, "virt vm gc") {
		t.Errorf("stderr %q: want a note on what removes ORPHANED rows", errOut)
	}

	out, _, code = run(t, "--root", root, "image", "list", "-o", "json")
	var imgs []map[string]any
	if err := json.Unmarshal([]byte(out), &imgs); err != nil || code != 0 || len(imgs) != 3 {
		t.Fatalf("image list -o json: exit %d, %v:\n%s", code, err, out)
	}
	if imgs[0]["class"] != "MANAGED" || imgs[0]["sizeBytes"] != float64(3<<20) || imgs[0]["virtualSizeBytes"] != float64(2<<30) || imgs[0]["allocatedBytes"] == nil {
		t.Errorf("managed row %v: want class, sizeBytes, virtualSizeBytes and allocatedBytes", imgs[0])
	}
	if imgs[1]["class"] != "ORPHANED" || imgs[1]["path"] != filepath.Join(images, ".half.img.partial") || imgs[1]["name"] != "half" {
		t.Errorf("orphan row %v: want class ORPHANED, name half and its path", imgs[1])
	}
}

// A VM spec that cannot be read makes every image's users unknown: the
// list still shows, says so, and the command fails.
func TestImageListUnreadableSpec(t *testing.T) {
	root, _ := imageRoot(t)
	spec := filepath.Join(root, "var/lib/virtcon/vms/0b7e5c9e-6a52-4c6b-9a47-5b1c0e9a1f00/vm.yaml")
	if err := os.MkdirAll(filepath.Dir(spec), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "--root", root, "image", "list")
	if code != ExitError || !strings.Contains(errOut, spec) || !strings.Contains(errOut, "cannot tell which VMs use images") {
		t.Errorf("image list: exit %d, stderr %q; want 1 and the unreadable spec named", code, errOut)
	}
	if !strings.Contains(out, "debian-12") || !strings.Contains(out, "?") {
		t.Errorf("image list: got\n%s\nwant the images with USED BY ?", out)
	}
	_, errOut, code = run(t, "--root", root, "image", "rm", "debian-12")
	if code != ExitError || !strings.Contains(errOut, spec) {
		t.Errorf("image rm: exit %d, stderr %q; want 1 and the unreadable spec named", code, errOut)
	}
}

func TestImageBadInput(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"ftp url", []string{"image", "pull", "ftp://x/y", "--name", "a"}, ExitUsage, `invalid image: url: must be an http:// or https:// URL (got "ftp://x/y")`},
		{"bad sha256", []string{"image", "pull", "http://127.0.0.1:1/x", "--name", "a", "--sha256", "abc"}, ExitUsage, `invalid image: --sha256: must be 64 hex digits (got "abc")`},
		{"bad name", []string{"image", "import", "/dev/null", "--name", "a/b"}, ExitUsage, `invalid image: --name`},
		{"device", []string{"image", "import", "/dev/zero", "--name", "z"}, ExitUsage, `invalid image: file: is a character device`},
		{"fifo", []string{"image", "import", fifo, "--name", "p"}, ExitUsage, `(got "` + fifo + `")`},
		{"missing file", []string{"image", "import", "/nonexistent.img"}, ExitError, "image import /nonexistent.img: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, errOut, code := run(t, append([]string{"--root", root}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "invalid virtual machine") {
				t.Errorf("virt %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, errOut, tt.code, tt.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("virt %s took %v", strings.Join(tt.args, " "), d)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(root, "var/lib/virtcon/images/*")); len(left) > 0 {
		t.Errorf("refused imports left %v", left)
	}
}

func TestImageExitCode(t *testing.T) {
	err := &vm.ImageError{Errs: []*vm.FieldError{{Field: "url", Value: "ftp://x/y", Msg: "must be an http:// or https:// URL"}}}
	if got := ExitCode(err); got != ExitUsage {
		t.Errorf("ExitCode(%v) = %d; want %d", err, got, ExitUsage)
	}
	if got := ExitCode(errors.Join(vm.ErrUsageUnknown, os.ErrPermission)); got != ExitNotPermitted {
		t.Errorf("ExitCode(usage unknown for lack of permission) = %d; want %d", got, ExitNotPermitted)
	}
}

func TestImageNameCompletion(t *testing.T) {
	root, _ := imageRoot(t)
	out, errOut, code := run(t, "--root", root, "__complete", "image", "rm", "")
	if code != 0 {
		t.Fatalf("__complete: exit %d, %s", code, errOut)
	}
	got := strings.Fields(out)
	if len(got) < 2 || got[0] != "debian-12" || !strings.HasPrefix(got[1], ":") {
		t.Errorf("completion of image rm: got %q; want only debian-12 (no orphans), then the directive", got)
	}
	if out, _, _ := run(t, "--root", root, "__complete", "image", "rm", "debian-12", ""); strings.Contains(out, "debian-12") {
		t.Errorf("completion after the one argument: got %q; want nothing", out)
	}
}

func TestVMCreateImageCompletion(t *testing.T) {
	root, _ := imageRoot(t)
	out, errOut, code := run(t, "--root", root, "__complete", "vm", "create", "web", "--image", "")
	if got := strings.Fields(out); code != 0 || len(got) < 2 || got[0] != "debian-12" || !strings.HasPrefix(got[1], ":") {
		t.Errorf("completion of vm create --image: exit %d, got %q (stderr %s); want only debian-12, then the directive", code, got, errOut)
	}
}
