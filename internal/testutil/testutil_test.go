package testutil

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRequireEUID(t *testing.T) {
	tests := []struct {
		euid     int
		skipped  bool
		wantSkip string
	}{
		{0, false, ""},
		{1000, true, "needs root: creates network namespaces"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.euid), func(t *testing.T) {
			r := Record(t, func(tb testing.TB) { requireEUID(tb, tt.euid, "creates network namespaces") })
			if r.Skipped != tt.skipped || r.Skip != tt.wantSkip || len(r.Errors) != 0 {
				t.Errorf("got %+v; want skipped %v with %q", r, tt.skipped, tt.wantSkip)
			}
		})
	}
}

func TestRequireRoot(t *testing.T) {
	r := Record(t, func(tb testing.TB) { RequireRoot(tb, "x") })
	if want := os.Geteuid() != 0; r.Skipped != want {
		t.Errorf("skipped %v as euid %d; want %v", r.Skipped, os.Geteuid(), want)
	}
}

func TestRequireCommand(t *testing.T) {
	var p string
	r := Record(t, func(tb testing.TB) { p = RequireCommand(tb, "sh", "apt-get install dash") })
	if r.Skipped || filepath.Base(p) != "sh" {
		t.Errorf("sh: got %q, %+v; want its path", p, r)
	}
	r = Record(t, func(tb testing.TB) { RequireCommand(tb, "virtcon-no-such-command", "apt-get install nothing") })
	if !r.Skipped || !strings.HasPrefix(r.Skip, "needs virtcon-no-such-command (apt-get install nothing): ") {
		t.Errorf("missing command: got %+v; want a skip naming it and the hint", r)
	}
}

func TestLogger(t *testing.T) {
	log := Logger(t)
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("debug records are dropped; want every level")
	}
	log.Debug("logged to the test's output", "k", "v")
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Errorf("got %d bytes; want 400 x", len(got))
	}
}

func TestWaitForText(t *testing.T) {
	n := 0
	read := func() string { n++; return strings.Repeat("ab ", n) + fmt.Sprint(n) }
	if got := WaitForText(t, time.Second, time.Millisecond, read, "ab ab", "3"); got != "ab ab ab 3" {
		t.Errorf("got %q; want the first text holding both", got)
	}
	r := Record(t, func(tb testing.TB) {
		WaitForText(tb, 20*time.Millisecond, time.Millisecond, func() string { return "ready" }, "ready", "never")
	})
	if !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], `no "never" after 20ms in:`+"\nready") {
		t.Errorf("got %+v; want one fatal report naming the missing text and the last read", r)
	}
}

func TestAllocatedBytes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := AllocatedBytes(t, p); got < 8192 || got >= 64<<20 {
		t.Errorf("a 64 MiB file with 8 KiB written takes %d bytes; want at least 8192, far below its size", got)
	}
	r := Record(t, func(tb testing.TB) { AllocatedBytes(tb, filepath.Join(t.TempDir(), "none")) })
	if !r.Fatal {
		t.Errorf("a missing file: got %+v; want the test stopped", r)
	}
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Errorf("RepoRoot = %s without go.mod: %v", root, err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Join(root, "internal", "testutil"); wd != want {
		t.Errorf("RepoRoot = %s; want the directory two above this package (%s)", root, wd)
	}
}

// setUpdate sets the -update flag for t, as the command line would, and
// puts back what the command line said when t ends.
func setUpdate(t *testing.T, on bool) {
	f := flag.Lookup("update")
	if f == nil {
		t.Fatal("no -update flag")
	}
	was := f.Value.String()
	if err := f.Value.Set(fmt.Sprint(on)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(was) })
}

// TestGolden compares with a golden file in a temp directory (never this
// package's testdata: the mismatch below must not be written).
func TestGolden(t *testing.T) {
	t.Chdir(t.TempDir())
	setUpdate(t, false)
	const frame = "a frame\n\x1b[1mbold\x1b[0m\n"
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "TestGolden.golden"), []byte(frame), 0o644); err != nil {
		t.Fatal(err)
	}
	Golden(t, frame)
	Golden(t, []byte(frame))
	r := Record(t, func(tb testing.TB) { Golden(tb, strings.Replace(frame, "bold", "bald", 1)) })
	if !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], `-\x1b[1mbold\x1b[0m`) || !strings.Contains(r.Errors[0], `+\x1b[1mbald\x1b[0m`) {
		t.Errorf("a changed frame: got %+v; want one fatal diff, escapes quoted", r)
	}
	t.Run("missing", func(t *testing.T) {
		r := Record(t, func(tb testing.TB) { Golden(tb, frame) })
		if !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "TestGolden/missing.golden") {
			t.Errorf("no golden file: got %+v; want a fatal report naming it", r)
		}
	})
}

// TestGoldenUpdate: with -update the golden file is written, then read.
func TestGoldenUpdate(t *testing.T) {
	t.Chdir(t.TempDir())
	setUpdate(t, true)
	Golden(t, "fresh\n")
	got, err := os.ReadFile(filepath.Join("testdata", "TestGoldenUpdate.golden"))
	if err != nil || string(got) != "fresh\n" {
		t.Errorf("golden file %q, %v; want what was passed", got, err)
	}
}

func TestRecord(t *testing.T) {
	after := false
	r := Record(t, func(tb testing.TB) {
		tb.Errorf("one %d", 1)
		tb.Error("two")
		if !tb.Failed() {
			tb.Error("not failed after Errorf")
		}
		tb.Fatalf("three")
		after = true
	})
	if after || !r.Fatal || r.Skipped || strings.Join(r.Errors, ",") != "one 1,two,three" {
		t.Errorf("got %+v (ran on after Fatal: %v); want three errors, fatal", r, after)
	}
	r = Record(t, func(tb testing.TB) { tb.Skipf("no %s", "kvm"); after = true })
	if after || !r.Skipped || r.Skip != "no kvm" || r.Fatal || len(r.Errors) != 0 {
		t.Errorf("got %+v (ran on after Skip: %v); want a skip only", r, after)
	}
	if r := Record(t, func(tb testing.TB) { tb.Log("fine") }); r.Fatal || r.Skipped || len(r.Errors) != 0 {
		t.Errorf("a passing check: got %+v", r)
	}
}
