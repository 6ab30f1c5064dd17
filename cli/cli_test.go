package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/cli/cobrakit"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// run executes virt with args and returns stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}

func TestExitCodes(t *testing.T) {
	t.Setenv("VIRTCON_HOST_ROOT", "")
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"version", []string{"version"}, ExitOK},
		{"help", []string{"--help"}, ExitOK},
		{"unknown command", []string{"frobnicate"}, ExitUsage},
		{"unknown subcommand", []string{"host", "frobnicate"}, ExitUsage},
		{"unknown flag", []string{"version", "--frob"}, ExitUsage},
		{"bad output format", []string{"version", "-o", "xml"}, ExitUsage},
		{"bad log level", []string{"version", "--log-level", "loud"}, ExitUsage},
		{"extra argument", []string{"version", "extra"}, ExitUsage},
		{"completion without shell", []string{"completion"}, ExitUsage},
		{"completion unknown shell", []string{"completion", "tcsh"}, ExitUsage},
		{"healthy fixture", []string{"host", "check", "--host-root", fakehost.Tree(t, "intel-iommu"), "-o", "json"}, ExitOK},
		{"container fixture fails checks", []string{"host", "check", "--host-root", fakehost.Tree(t, "container"), "-o", "json"}, ExitCheckFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := run(t, tc.args...)
			if code != tc.want {
				t.Errorf("virt %s: exit %d; want %d (stderr: %s)", strings.Join(tc.args, " "), code, tc.want, errOut)
			}
		})
	}
}

func TestExitCodeMapping(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{io.EOF, 1},
		{&UsageError{io.EOF}, 2},
		{ErrCheckFailed, 3},
		{os.ErrPermission, 4},
		{ErrNotPermitted, 4},
		{context.Canceled, 130},
	}
	for _, tc := range tests {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

func TestHostCheckJSON(t *testing.T) {
	out, errOut, code := run(t, "host", "check", "--host-root", fakehost.Tree(t, "pvm-build"), "-o", "json")
	if code != ExitOK && code != ExitCheckFailed {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Checks []struct {
			ID, Status, Detail, Hint string
		} `json:"checks"`
		Acceleration string `json:"acceleration"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if len(rep.Checks) < 15 {
		t.Errorf("got %d checks; want at least 15", len(rep.Checks))
	}
	seen := map[string]bool{}
	for _, c := range rep.Checks {
		if seen[c.ID] {
			t.Errorf("duplicate check id %q", c.ID)
		}
		seen[c.ID] = true
		switch hostinfo.Status(c.Status) {
		case hostinfo.Pass, hostinfo.Warn, hostinfo.Fail, hostinfo.Unknown:
		default:
			t.Errorf("check %s: status %q", c.ID, c.Status)
		}
		if c.Detail == "" {
			t.Errorf("check %s has no detail", c.ID)
		}
	}
	// A fixture root never runs the probe: it must say so, not guess.
	for _, c := range rep.Checks {
		if c.ID == "kvm.probe" && (c.Status != "UNKNOWN" || !strings.Contains(c.Detail, "live machine")) {
			t.Errorf("kvm.probe on a fixture = %s %q; want UNKNOWN naming the live machine", c.Status, c.Detail)
		}
	}
	if rep.Acceleration != "tcg" {
		t.Errorf("acceleration %q; want tcg (probe not run on a fixture)", rep.Acceleration)
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("JSON output contains escape sequences")
	}
}

func TestHostInfoFormats(t *testing.T) {
	root := fakehost.Tree(t, "intel-iommu")
	out, errOut, code := run(t, "host", "info", "--host-root", root, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var inv hostinfo.Inventory
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		t.Fatalf("json: %v", err)
	}
	if len(inv.GPUs) == 0 || len(inv.IOMMU.Groups) == 0 || len(inv.Hugepages.Pools) == 0 {
		t.Errorf("json inventory lacks GPUs/IOMMU groups/hugepages: %+v", inv)
	}
	yout, errOut, code := run(t, "host", "info", "--host-root", root, "-o", "yaml")
	if code != 0 {
		t.Fatalf("yaml exit %d: %s", code, errOut)
	}
	var yinv hostinfo.Inventory
	if err := yaml.Unmarshal([]byte(yout), &yinv); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	if yinv.Hostname != inv.Hostname || len(yinv.PCI) != len(inv.PCI) {
		t.Errorf("yaml and json disagree: hostname %q/%q, %d/%d PCI devices", yinv.Hostname, inv.Hostname, len(yinv.PCI), len(inv.PCI))
	}
	tout, _, code := run(t, "host", "info", "--host-root", root)
	if code != 0 || !strings.Contains(tout, inv.Hostname) || !strings.Contains(tout, "0000:65:00.0") {
		t.Errorf("table output (exit %d) lacks the hostname or the GPU:\n%s", code, tout)
	}
}

func TestHostRootFromEnv(t *testing.T) {
	t.Setenv("VIRTCON_HOST_ROOT", fakehost.Tree(t, "intel-iommu"))
	out, _, code := run(t, "host", "info", "-o", "json")
	if code != 0 || !strings.Contains(out, "0000:65:00.0") {
		t.Errorf("VIRTCON_HOST_ROOT was not honoured (exit %d)", code)
	}
}

func TestNoColor(t *testing.T) {
	var out bytes.Buffer
	io := &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: io.Discard, OutTTY: true, Color: true}
	Run(context.Background(), []string{"host", "check", "--host-root", fakehost.Tree(t, "container"), "--no-color"}, io)
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("--no-color output contains escape sequences")
	}
	out.Reset()
	io.Color = true
	t.Setenv("NO_COLOR", "1")
	Run(context.Background(), []string{"host", "check", "--host-root", fakehost.Tree(t, "container")}, io)
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("NO_COLOR output contains escape sequences")
	}
}

func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := run(t, "completion", sh)
		if code != 0 || !strings.Contains(out, "virt") || len(out) < 200 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %s", sh, code, len(out), errOut)
		}
	}
}

func TestDiagnostics(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "diag.tar.gz")
	out, errOut, code := run(t, "diagnostics", "--host-root", fakehost.Tree(t, "intel-iommu"), "-o", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.TrimSpace(out) != file {
		t.Errorf("stdout %q; want the bundle path %q", out, file)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v; want 0600", st.Mode().Perm())
	}
	f, _ := os.Open(file)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	got := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.NewDecoder(tr).Decode(&v); err != nil {
			t.Errorf("%s is not JSON: %v", h.Name, err)
		}
		got[h.Name] = true
	}
	for _, want := range []string{"versions.json", "inventory.json", "checks.json", "errors.json"} {
		if !got[want] {
			t.Errorf("bundle lacks %s (has %v)", want, got)
		}
	}
}

// The generated reference must match the commands; `make docs` refreshes it.
func TestReferenceUpToDate(t *testing.T) {
	var buf bytes.Buffer
	if err := cobrakit.Reference(&buf, NewRootCmd(&Env{IO: &IOStreams{}})); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "docs", "cli-reference.md"))
	if err != nil {
		t.Fatalf("docs/cli-reference.md: %v (run make docs)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Error("docs/cli-reference.md is out of date: run `make docs`")
	}
}
