package iso9660

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

// These tests cross-check images against the real readers when they are
// installed (genisoimage's isoinfo, libarchive's bsdtar, xorriso, 7-Zip,
// util-linux's blkid). Each one skips when its tool is missing.

func toolImage(t *testing.T) (string, []File) {
	t.Helper()
	files := append(seedFiles(),
		File{Name: "Mixed-Case_name.v2.yaml", Data: bytes.Repeat([]byte("0123456789abcdef"), 64*1024+3)},
		File{Name: "empty"},
	)
	path := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(path, mustWrite(t, "cidata", files), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, files
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// isoinfoNames returns the file names of an isoinfo -l listing (the text
// after the "[ extent flags]" column).
func isoinfoNames(out []byte) map[string]bool {
	names := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		_, after, ok := strings.Cut(line, "]  ")
		if !ok {
			continue
		}
		name := strings.TrimSuffix(strings.TrimRight(after, "\n"), " ")
		if name != "." && name != ".." {
			names[name] = true
		}
	}
	return names
}

func wantNames(t *testing.T, tool string, got map[string]bool, files []File) {
	t.Helper()
	for _, f := range files {
		if !got[f.Name] {
			t.Errorf("%s: %q missing from listing %v", tool, f.Name, got)
		}
	}
	if len(got) != len(files) {
		t.Errorf("%s: listed %d names %v, want %d", tool, len(got), got, len(files))
	}
}

func TestIsoinfo(t *testing.T) {
	testutil.RequireCommand(t, "isoinfo", "apt-get install genisoimage")
	img, files := toolImage(t)

	d := string(run(t, "isoinfo", "-d", "-i", img))
	for _, want := range []string{"Volume id: cidata\n", "Joliet with UCS level 3 found", "Rock Ridge signatures version 1 found"} {
		if !strings.Contains(d, want) {
			t.Errorf("isoinfo -d output lacks %q:\n%s", want, d)
		}
	}
	wantNames(t, "isoinfo -J -l", isoinfoNames(run(t, "isoinfo", "-J", "-l", "-i", img)), files)
	wantNames(t, "isoinfo -R -l", isoinfoNames(run(t, "isoinfo", "-R", "-l", "-i", img)), files)
	plain := isoinfoNames(run(t, "isoinfo", "-l", "-i", img))
	for _, n := range []string{"META_DAT.;1", "USER_DAT.;1", "NETWORK_.;1"} {
		if !plain[n] {
			t.Errorf("isoinfo -l: %q missing from %v", n, plain)
		}
	}
	for _, f := range files {
		if got := run(t, "isoinfo", "-J", "-x", "/"+f.Name, "-i", img); !bytes.Equal(got, f.Data) {
			t.Errorf("isoinfo -J -x /%s: got %d bytes %q, want %d bytes", f.Name, len(got), trunc(got), len(f.Data))
		}
		if got := run(t, "isoinfo", "-R", "-x", "/"+f.Name, "-i", img); !bytes.Equal(got, f.Data) {
			t.Errorf("isoinfo -R -x /%s: got %d bytes %q, want %d bytes", f.Name, len(got), trunc(got), len(f.Data))
		}
	}
}

func TestBsdtar(t *testing.T) {
	testutil.RequireCommand(t, "bsdtar", "apt-get install libarchive-tools")
	img, files := toolImage(t)
	got := map[string]bool{}
	for line := range strings.Lines(string(run(t, "bsdtar", "-tf", img))) {
		if line = strings.TrimRight(line, "\n"); line != "." && line != "./" {
			got[line] = true
		}
	}
	wantNames(t, "bsdtar -tf", got, files)
	for _, f := range files {
		if data := run(t, "bsdtar", "-xOf", img, f.Name); !bytes.Equal(data, f.Data) {
			t.Errorf("bsdtar -xOf %s: got %d bytes, want %d", f.Name, len(data), len(f.Data))
		}
	}
}

func TestXorriso(t *testing.T) {
	testutil.RequireCommand(t, "xorriso", "apt-get install xorriso")
	img, files := toolImage(t)
	got := map[string]bool{}
	for line := range strings.Lines(string(run(t, "xorriso", "-abort_on", "WARNING", "-indev", img, "-ls", "/"))) {
		line = strings.TrimRight(line, "\n")
		if len(line) > 1 && line[0] == '\'' && line[len(line)-1] == '\'' {
			got[line[1:len(line)-1]] = true
		}
	}
	wantNames(t, "xorriso -ls", got, files)

	dir := t.TempDir()
	run(t, "xorriso", "-abort_on", "WARNING", "-osirrox", "on", "-indev", img, "-extract", "/", dir)
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil || !bytes.Equal(data, f.Data) {
			t.Errorf("xorriso -extract %s: err %v, got %d bytes, want %d", f.Name, err, len(data), len(f.Data))
		}
	}
}

func Test7z(t *testing.T) {
	testutil.RequireCommand(t, "7z", "apt-get install p7zip-full")
	img, files := toolImage(t)
	got := map[string]bool{}
	for line := range strings.Lines(string(run(t, "7z", "l", "-slt", img))) {
		if name, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "Path = "); ok && name != img {
			got[name] = true
		}
	}
	wantNames(t, "7z l", got, files)
	for _, f := range files {
		if data := run(t, "7z", "e", "-so", img, f.Name); !bytes.Equal(data, f.Data) {
			t.Errorf("7z e -so %s: got %d bytes, want %d", f.Name, len(data), len(f.Data))
		}
	}
}

func TestBlkid(t *testing.T) {
	testutil.RequireCommand(t, "blkid", "apt-get install util-linux")
	img, _ := toolImage(t)
	out := string(run(t, "blkid", "-p", img))
	for _, want := range []string{`LABEL="cidata"`, `TYPE="iso9660"`} {
		if !strings.Contains(out, want) {
			t.Errorf("blkid -p output lacks %s: %s", want, out)
		}
	}
}
