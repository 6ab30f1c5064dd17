package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// qemuImgOrFake is the real qemu-img when installed (so that, without the
// regular-file check, an import would go on to read the source), else a
// path that does not exist.
func qemuImgOrFake(t *testing.T, m *Manager) {
	t.Helper()
	if p, err := exec.LookPath("qemu-img"); err == nil {
		m.opts.QEMUImg = p
	}
}

func TestImportRefusesNonRegular(t *testing.T) {
	t.Parallel()
	m, root, _ := newTestManager(t)
	qemuImgOrFake(t, m)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero.img")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file string
		want       []string
	}{
		{"char device", "/dev/zero", []string{`"/dev/zero"`, "a character device"}},
		{"fifo", fifo, []string{`"` + fifo + `"`, "a FIFO"}},
		{"directory", dir, []string{`"` + dir + `"`, "a directory"}},
		{"symlink to a device", link, []string{`"` + link + `"`, "a character device (/dev/zero)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// the deadline stops a copy that would otherwise run until the
			// disk is full; an open of the FIFO that blocks fails the test
			// rather than hanging it
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { _, err := m.ImportImage(ctx, tt.file, "z"); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(6 * time.Second):
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close() // lets a blocked open return
				}
				t.Fatalf("ImportImage(%s) still running after 6 s; want a refusal before reading", tt.file)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("ImportImage(%s) took %v; want a refusal before reading", tt.file, d)
			}
			if !errors.Is(err, ErrInvalidImage) {
				t.Fatalf("ImportImage(%s): got %v; want ErrInvalidImage", tt.file, err)
			}
			for _, w := range append(tt.want, "file: is ", "regular") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ImportImage(%s): got %q; want it to contain %q", tt.file, err, w)
				}
			}
		})
	}
	_, err := m.ImportImage(context.Background(), filepath.Join(dir, "nonexistent.img"), "")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "nonexistent.img")+": no such file or directory") {
		t.Errorf("ImportImage(nonexistent): got %v; want ErrNotExist naming the path", err)
	}
	if got := dirEntries(t, filepath.Join(root, "var/lib/virtcon/images")); len(got) != 0 {
		t.Errorf("images dir after refusals: got %q; want nothing", got)
	}
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sparseRaw makes a raw file of size bytes holding data at the given
// offsets (and a block of written zeros, which is data to the file system
// but needs no space in the copy).
func sparseRaw(t *testing.T, path string, size int64, data map[int64]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 64<<10), 8<<20); err != nil {
		t.Fatal(err)
	}
	for off, s := range data {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
}

func TestImportSparse(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	ctx := context.Background()
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	dir := t.TempDir()

	const size = 64<<20 + 3*512 // whole sectors (a raw image is), not a whole number of 4 KiB blocks
	raw := filepath.Join(dir, "sparse.raw")
	sparseRaw(t, raw, size, map[int64]string{0: "boot", 1<<20 + 100: "unaligned data", 40<<20 - 2: "across a block boundary", size - 1: "z"})
	qcow := filepath.Join(dir, "prealloc.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", "-o", "preallocation=metadata", qcow, "256M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	for _, tt := range []struct {
		name, file, format string
		maxAllocated       int64
	}{
		{"raw", raw, "raw", 64 << 10},                                           // four blocks of data, some slack
		{"qcow2", qcow, "qcow2", testutil.AllocatedBytes(t, qcow) + (64 << 10)}, // its metadata
	} {
		t.Run(tt.name, func(t *testing.T) {
			img, err := m.ImportImage(ctx, tt.file, tt.name)
			if err != nil {
				t.Fatalf("ImportImage: %v", err)
			}
			st, _ := os.Stat(tt.file)
			want := fileSHA(t, tt.file)
			if img.SHA256 != want || img.SizeBytes != st.Size() || img.Format != tt.format {
				t.Errorf("image: got sha256 %s, %d bytes, %s; want %s, %d bytes, %s (the sha256 of the whole file)", img.SHA256, img.SizeBytes, img.Format, want, st.Size(), tt.format)
			}
			if got := fileSHA(t, img.Path); got != want {
				t.Errorf("stored file: sha256 %s; want %s (a byte-identical copy)", got, want)
			}
			if got := testutil.AllocatedBytes(t, img.Path); got > tt.maxAllocated {
				t.Errorf("stored file takes %d bytes on disk; want at most %d (holes kept)", got, tt.maxAllocated)
			}
			if img.AllocatedBytes != testutil.AllocatedBytes(t, img.Path) || img.VirtualSizeBytes == nil {
				t.Errorf("image: allocated %d, virtual size %v; want %d and a virtual size", img.AllocatedBytes, img.VirtualSizeBytes, testutil.AllocatedBytes(t, img.Path))
			}
		})
	}
}

// TestImageWriter writes the same content in pieces of every awkward size:
// the file reads back identical, the sha256 is the content's, and all-zero
// blocks take no space.
func TestImageWriter(t *testing.T) {
	t.Parallel()
	content := make([]byte, 1<<20+5)
	copy(content[0:], "head")
	copy(content[300<<10+4090:], "spans two blocks")
	content[len(content)-1] = 'z'
	sum := sha256.Sum256(content)
	for _, piece := range []int{1, 7, 4095, 4096, 5000, 1 << 20, len(content)} {
		path := filepath.Join(t.TempDir(), "img")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := newImageWriter(context.Background(), f)
		for p := content; len(p) > 0; {
			k := min(piece, len(p))
			if n, err := w.Write(p[:k]); n != k || err != nil {
				t.Fatalf("piece %d: Write: %d, %v", piece, n, err)
			}
			p = p[k:]
		}
		if err := w.finish(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) || w.size() != int64(len(content)) {
			t.Errorf("piece %d: file of %d bytes differs from the content (%d bytes)", piece, len(got), len(content))
		}
		if h := w.h.Sum(nil); !bytes.Equal(h, sum[:]) {
			t.Errorf("piece %d: sha256 %x; want %x", piece, h, sum)
		}
		if a := testutil.AllocatedBytes(t, path); a > 5*4096 {
			t.Errorf("piece %d: %d bytes allocated; want at most 4 blocks (zeros are holes)", piece, a)
		}
	}
}

// BenchmarkImportSparse imports a 2 GiB raw file holding 4 KiB of data:
// the copy touches only the data; the sha256 still covers all 2 GiB (as
// zeros), which is nearly all of the time.
func BenchmarkImportSparse(b *testing.B) {
	qemuImg := testutil.RequireCommand(b, "qemu-img", "apt-get install qemu-utils")
	dir := b.TempDir()
	raw := filepath.Join(dir, "sparse.raw")
	f, err := os.Create(raw)
	if err != nil {
		b.Fatal(err)
	}
	f.Truncate(2 << 30)
	f.WriteAt([]byte("data"), 1<<20)
	f.Close()
	root, err := os.MkdirTemp("", "vmbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	m := NewManager(Options{Layout: paths.New(root), QEMUImg: qemuImg})
	ctx := context.Background()
	b.SetBytes(2 << 30)
	for b.Loop() {
		if _, err := m.ImportImage(ctx, raw, "bench"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.RemoveImage(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
