package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

func TestImageValidation(t *testing.T) {
	t.Parallel()
	m, root, _ := newTestManager(t)
	ctx := context.Background()
	good := strings.Repeat("ab", 32)
	pulls := []struct {
		name, url, img, sha string
		want                []string
	}{
		{"bad name", "http://127.0.0.1:1/x", "bad/name", "", []string{"name: ", `"bad/name"`}},
		{"empty name", "http://127.0.0.1:1/x", "", "", []string{"name: ", `""`}},
		{"dotted name", "http://127.0.0.1:1/x", "debian.qcow2", "", []string{"name: ", `"debian.qcow2"`}},
		{"short sha", "http://127.0.0.1:1/x", "img", "abc", []string{"sha256: ", `"abc"`}},
		{"long sha", "http://127.0.0.1:1/x", "img", good + "0", []string{"sha256: "}},
		{"non-hex sha", "http://127.0.0.1:1/x", "img", strings.Repeat("g", 64), []string{"sha256: "}},
		{"sha with prefix", "http://127.0.0.1:1/x", "img", "sha256:" + good, []string{"sha256: "}},
		{"file url", "file:///etc/passwd", "img", good, []string{"url", `"file:///etc/passwd"`}},
		{"ftp url", "ftp://example.com/a.img", "img", "", []string{`url: must be an http:// or https:// URL (got "ftp://example.com/a.img")`}},
		{"every problem at once", "ftp://x/y", "a/b", "abc", []string{`name: `, `"a/b"`, `sha256: `, `"abc"`, `url`, `"ftp://x/y"`}},
		{"no scheme", "example.com/a.img", "img", "", []string{"url"}},
		{"upper-case scheme", "HTTP://example.com/a.img", "img", "", []string{"url"}},
		{"bad url", "http://exa mple.com/\x7f", "img", "", []string{"url"}},
	}
	for _, tt := range pulls {
		_, err := m.PullImage(ctx, tt.url, tt.img, tt.sha, nil)
		var ie *ImageError
		if !errors.Is(err, ErrInvalidImage) || !errors.As(err, &ie) || errors.Is(err, ErrInvalid) {
			t.Errorf("%s: PullImage: got %v; want an *ImageError (ErrInvalidImage, not ErrInvalid)", tt.name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "invalid image: ") {
			t.Errorf("%s: got %q; want it to start with \"invalid image: \"", tt.name, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %q; want it to contain %q", tt.name, err, w)
			}
		}
	}
	imports := []struct{ file, name, want string }{
		{"/tmp/x/debian-12.generic.qcow2", "", `"debian-12.generic"`},
		{"/tmp/x/a b.img", "", `"a b"`},
		{"/tmp/x/ok.img", "-bad", `"-bad"`},
		{"/tmp/x/ok.img", "a,b", `"a,b"`},
	}
	for _, tt := range imports {
		_, err := m.ImportImage(ctx, tt.file, tt.name)
		if !errors.Is(err, ErrInvalidImage) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ImportImage(%q, %q): got %v; want ErrInvalidImage naming %s", tt.file, tt.name, err, tt.want)
		}
	}
	if got := dirEntries(t, filepath.Join(root, "var/lib/virtcon/images")); len(got) != 0 {
		t.Errorf("images dir: got %q; want nothing", got)
	}
	if imgs, err := m.ListImages(ctx); err != nil || imgs == nil || len(imgs) != 0 {
		t.Errorf("ListImages: got %v, %v; want an empty list", imgs, err)
	}
	if err := m.RemoveImage(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveImage(nope): got %v; want ErrNotFound", err)
	}
}

// requireQemuImg returns qemu-img's path or skips: the image store checks
// every image with it.
func requireQemuImg(t *testing.T) string {
	t.Helper()
	return testutil.RequireCommand(t, "qemu-img", "apt-get install qemu-utils; the image store tests need it")
}

func TestPullImage(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	ctx := context.Background()
	// A raw image no format probe mistakes for anything else.
	data := bytes.Repeat([]byte("virtcon "), (1<<20)/8)
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/base.img" {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	t.Cleanup(srv.Close)

	m, root, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	images := filepath.Join(root, "var/lib/virtcon/images")
	var progress []Progress
	img, err := m.PullImage(ctx, srv.URL+"/base.img", "base", strings.ToUpper(good), func(p Progress) { progress = append(progress, p) })
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	if img.Name != "base" || img.Format != "raw" || img.SHA256 != good || img.SizeBytes != 1<<20 || img.Source != srv.URL+"/base.img" {
		t.Errorf("image: got %+v; want base, raw, %s, 1 MiB", img, good)
	}
	if img.Path != filepath.Join(images, "base.img") {
		t.Errorf("path: got %s; want %s", img.Path, filepath.Join(images, "base.img"))
	}
	if st, err := os.Stat(img.Path); err != nil || st.Mode().Perm() != 0o600 || st.Size() != 1<<20 {
		t.Errorf("image file: got %v, %v; want 1 MiB, mode 0600", st, err)
	}
	if _, err := os.Stat(img.Path + ".sha256"); err != nil {
		t.Errorf("marker: got %v; want it written", err)
	}
	if n := len(progress); n == 0 || !progress[n-1].Done || progress[n-1].Bytes != 1<<20 || progress[n-1].Image != "base" {
		t.Errorf("progress: got %+v; want it to end with base done at 1 MiB", progress)
	}
	if _, err := m.PullImage(ctx, srv.URL+"/base.img", "base", "", nil); !errors.Is(err, ErrExists) {
		t.Errorf("second pull: got %v; want ErrExists", err)
	}

	// Failures leave nothing: no image, no marker, no partial file.
	fails := []struct {
		name, url, sha string
		wantIs         error
		wantMsg        string
	}{
		{"bad", srv.URL + "/base.img", strings.Repeat("0", 64), ErrChecksum, good},
		{"gone", srv.URL + "/missing.img", "", nil, "404"},
	}
	for _, f := range fails {
		_, err := m.PullImage(ctx, f.url, f.name, f.sha, nil)
		if err == nil || (f.wantIs != nil && !errors.Is(err, f.wantIs)) || !strings.Contains(err.Error(), f.wantMsg) {
			t.Errorf("pull %s: got %v; want %v containing %q", f.name, err, f.wantIs, f.wantMsg)
		}
		if got := dirEntries(t, images); !reflect.DeepEqual(got, []string{"base.img", "base.img.sha256"}) {
			t.Errorf("after failed pull %s: got %q; want only base", f.name, got)
		}
	}

	// An image in use by a VM cannot be removed.
	vm := &VirtualMachine{Metadata: Metadata{Name: "db"}, Spec: Spec{Disks: []Disk{{Name: "root", Image: "base", Size: "2M"}}}}
	vm = mustCreate(t, m, vm)
	disk := m.diskPath(vm.Metadata.UID, "root")
	if st, err := os.Stat(disk); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("overlay: got %v, %v; want mode 0600", st, err)
	}
	list, err := m.ListImages(ctx)
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0].UsedBy, []string{"db"}) {
		t.Errorf("ListImages: got %+v, %v; want base used by db", list, err)
	}
	if err := m.RemoveImage(ctx, "base"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "db") {
		t.Errorf("RemoveImage in use: got %v; want ErrInUse naming db", err)
	}
	if _, err := os.Stat(img.Path + ".sha256"); err != nil {
		t.Errorf("marker after refused removal: got %v; want it kept", err)
	}

	// Apply adds a blank disk through qemu-img.
	in := &VirtualMachine{Metadata: Metadata{Name: "db"}, Spec: Spec{Disks: []Disk{{Name: "root", Image: "base", Size: "2M"}, {Name: "data", Size: "1M"}}}}
	res, err := m.Apply(ctx, in)
	if err != nil || res.Action != "configured" || res.VM.Metadata.Generation != 2 {
		t.Fatalf("Apply adding a disk: got %+v, %v; want configured at generation 2", res, err)
	}
	if _, err := os.Stat(m.diskPath(vm.Metadata.UID, "data")); err != nil {
		t.Errorf("added disk: got %v; want it made", err)
	}

	if err := m.Delete(ctx, "db", false); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveImage(ctx, "base"); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	if got := dirEntries(t, images); len(got) != 0 {
		t.Errorf("after RemoveImage: got %q; want nothing", got)
	}
}

func TestImportImage(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	ctx := context.Background()
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	dir := t.TempDir()
	base := filepath.Join(dir, "tiny-1.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", base, "1M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	img, err := m.ImportImage(ctx, base, "")
	if err != nil {
		t.Fatalf("ImportImage: %v", err)
	}
	if img.Name != "tiny-1" || img.Format != "qcow2" || img.Source != "file://"+base {
		t.Errorf("image: got %+v; want tiny-1, qcow2, file://%s", img, base)
	}
	// An image that points at another file could read the host's files.
	overlay := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, overlay).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	if _, err := m.ImportImage(ctx, overlay, "overlay"); err == nil || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("ImportImage of an overlay: got %v; want a refusal naming the backing file", err)
	}
	if _, err := m.image("overlay"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused image: got %v; want ErrNotFound", err)
	}
	// raw: whole 512-byte sectors only (qemu-img reads anything as raw),
	// but for a kernel or an initrd, which the image store holds too (a
	// director's manifest boots only files in it)
	for _, tt := range []struct {
		size  int64
		magic string // written at at
		at    int
		want  string // "" imported
	}{
		{size: 1 << 20},
		{size: 1<<20 + 1, want: `file: a raw image's size must be a multiple of 512 bytes (its size is 1048577 bytes, 1 over)`},
		{size: 511, want: `its size is 511 bytes, 511 over`},
		{size: 1<<20 + 3, magic: "HdrS", at: 0x202}, // a bzImage
		{size: 1<<20 + 5, magic: "\x7fELF"},         // a vmlinux
		{size: 1<<20 + 7, magic: "\x1f\x8b"},        // a gzipped initrd
		{size: 1<<20 + 9, magic: "070701"},          // a cpio initrd
	} {
		raw := filepath.Join(dir, fmt.Sprintf("raw-%d.img", tt.size))
		b := make([]byte, tt.size)
		copy(b[tt.at:], tt.magic)
		if err := os.WriteFile(raw, b, 0o600); err != nil {
			t.Fatal(err)
		}
		img, err := m.ImportImage(ctx, raw, "")
		if tt.want == "" {
			if err != nil || img.Format != "raw" {
				t.Errorf("ImportImage of a raw file of %d bytes: got %+v, %v; want imported", tt.size, img, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidImage) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), raw) {
			t.Errorf("ImportImage of a raw file of %d bytes: got %v; want ErrInvalidImage naming %s and %q", tt.size, err, raw, tt.want)
		}
		if _, err := m.image(fmt.Sprintf("raw-%d", tt.size)); !errors.Is(err, ErrNotFound) {
			t.Errorf("refused image: got %v; want ErrNotFound", err)
		}
	}
}

// TestPullImageErrorsHideCredentials: a pull's URL may carry credentials
// (user info, a presigned query); its errors reach a director's task
// failures and store, so they never show them.
func TestPullImageErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	m, _, _ := newTestManager(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct{ name, url, want string }{
		{"http-404", "http://alice:s3cret@" + host + "/x.img?X-Sig=t0ken", "HTTP 404"},
		{"token-user", "http://t0ken@" + host + "/x.img", "HTTP 404"},
		{"refused", strings.Replace(deadURL, "http://", "http://alice:s3cret@", 1) + "/x.img?sig=t0ken", "download"},
		{"bad-scheme", "ftp://alice:s3cret@" + host + "/x.img?sig=t0ken", "http:// or https://"},
		{"unparsable", "http://alice:s3cret@" + host + "/x.img?sig=t0ken\x7f", "url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.PullImage(context.Background(), c.url, "img-"+c.name, "", nil)
			if err == nil {
				t.Fatal("got nil; want an error")
			}
			msg := err.Error()
			if strings.Contains(msg, "s3cret") || strings.Contains(msg, "t0ken") {
				t.Errorf("error shows a credential: %q", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("got %q; want it to contain %q", msg, c.want)
			}
			var ie *ImageError
			if errors.As(err, &ie) {
				for _, fe := range ie.Errs {
					if v := fmt.Sprint(fe.Value); strings.Contains(v, "s3cret") || strings.Contains(v, "t0ken") {
						t.Errorf("field %s value shows a credential: %q", fe.Field, v)
					}
				}
			}
		})
	}
}
