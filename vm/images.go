package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/fielderr"
)

// Image is a base image in the store (class MANAGED: one with a marker,
// which is written last), or the leftover of an interrupted pull or
// import (class ORPHANED: a partial file, or an image file without a
// marker), which no VM can use and `virt vm gc` removes.
type Image struct {
	Name  string `json:"name" yaml:"name"`
	Class string `json:"class" yaml:"class"` // ClassManaged or ClassOrphaned
	Path  string `json:"path" yaml:"path"`
	// Format, SHA256, Source and AddedAt come from the marker: ORPHANED
	// rows have none.
	Format string `json:"format,omitempty" yaml:"format,omitempty"`
	SHA256 string `json:"sha256,omitempty" yaml:"sha256,omitempty"`
	// SizeBytes is the image file's length in bytes, holes included: the
	// bytes the sha256 covers.
	SizeBytes int64 `json:"sizeBytes" yaml:"sizeBytes"`
	// VirtualSizeBytes is the disk size a guest sees; nil when unknown.
	VirtualSizeBytes *int64 `json:"virtualSizeBytes" yaml:"virtualSizeBytes"`
	// AllocatedBytes is the space the file takes on the host's disk.
	AllocatedBytes int64     `json:"allocatedBytes" yaml:"allocatedBytes"`
	Source         string    `json:"source,omitempty" yaml:"source,omitempty"`
	AddedAt        time.Time `json:"addedAt,omitzero" yaml:"addedAt,omitempty"`
	// UsedBy names the VMs whose disks use the image; nil when that cannot
	// be told (some VM spec is unreadable).
	UsedBy []string `json:"usedBy" yaml:"usedBy"`
	// Reason is why an ORPHANED row is one (ReasonIncomplete).
	Reason  string `json:"reason,omitempty" yaml:"reason,omitempty"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

// imageMarker is the <name>.img.sha256 file. Markers written before
// VirtualSizeBytes was recorded have it 0; qemu-img then tells.
type imageMarker struct {
	Name             string    `json:"name"`
	Format           string    `json:"format"`
	SHA256           string    `json:"sha256"`
	SizeBytes        int64     `json:"sizeBytes"`
	VirtualSizeBytes int64     `json:"virtualSizeBytes,omitempty"`
	Source           string    `json:"source"`
	AddedAt          time.Time `json:"addedAt"`
}

// ErrInUse is returned when removing an image that VMs use.
var ErrInUse = errors.New("in use")

// ErrChecksum is returned when a download does not match its sha256.
var ErrChecksum = errors.New("sha256 mismatch")

// ErrInvalidImage is wrapped by every bad input to an image operation
// (name, URL, checksum, file): bad input, not a failure. It is errors.Is
// fielderr.ErrInvalid too, but not ErrInvalid (no VM is at fault).
var ErrInvalidImage = fielderr.NewKind("invalid image")

// ErrUsageUnknown is returned when some VM specs cannot be read, so which
// VMs use an image cannot be told: image removal fails closed on it.
var ErrUsageUnknown = errors.New("cannot tell which VMs use images: some VM specs cannot be read")

// ImageError lists every problem with the input to an image operation.
// It is its own type (so that errors.As tells it from a VM's
// ValidationError), a view of a fielderr.ValidationError of kind
// ErrInvalidImage, which it unwraps to for faces that map every
// validation error alike.
type ImageError struct{ Errs []*FieldError }

func (e *ImageError) list() *ValidationError { return fielderr.New(ErrInvalidImage, e.Errs...) }

func (e *ImageError) Error() string { return e.list().Error() }

// Unwrap gives the list as a *fielderr.ValidationError of kind
// ErrInvalidImage: errors.Is(err, ErrInvalidImage) and
// errors.Is(err, fielderr.ErrInvalid) are true, ErrInvalid is not.
func (e *ImageError) Unwrap() error { return e.list() }

// usageError carries the unreadable specs behind ErrUsageUnknown, so
// errors.Is finds their causes (fs.ErrPermission when not root).
type usageError struct{ errs []error }

func (e *usageError) Error() string {
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = err.Error()
	}
	return ErrUsageUnknown.Error() + ": " + strings.Join(msgs, "; ")
}

func (e *usageError) Unwrap() []error { return append([]error{ErrUsageUnknown}, e.errs...) }

func (m *Manager) imagePath(name string) string {
	return filepath.Join(m.layout().ImagesDir(), name+".img")
}
func (m *Manager) markerPath(name string) string { return m.imagePath(name) + ".sha256" }
func (m *Manager) partialPath(name string) string {
	return filepath.Join(m.layout().ImagesDir(), "."+name+".img.partial")
}

// image returns a complete image (one with a marker).
func (m *Manager) image(name string) (*Image, error) {
	b, err := os.ReadFile(m.markerPath(name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &ImageNotFoundError{Name: name}
		}
		return nil, fmt.Errorf("image %q: marker: %w", name, err)
	}
	var mk imageMarker
	if err := json.Unmarshal(b, &mk); err != nil {
		return nil, fmt.Errorf("image %q: corrupt marker %s: %w", name, m.markerPath(name), err)
	}
	img := &Image{Name: name, Class: ClassManaged, Path: m.imagePath(name), Format: mk.Format, SHA256: mk.SHA256,
		SizeBytes: mk.SizeBytes, Source: mk.Source, AddedAt: mk.AddedAt}
	if mk.VirtualSizeBytes > 0 {
		img.VirtualSizeBytes = &mk.VirtualSizeBytes
	}
	return img, nil
}

// virtualSize is the base's guest-visible size: from the marker, or (for
// markers older than that field) from qemu-img.
func (m *Manager) virtualSize(ctx context.Context, img *Image) (int64, error) {
	if img.VirtualSizeBytes != nil {
		return *img.VirtualSizeBytes, nil
	}
	info, err := m.inspectImage(ctx, img.Path, nil)
	if err != nil {
		return 0, fmt.Errorf("image %q: virtual size: %w", img.Name, err)
	}
	return info.VirtualSize, nil
}

// ListImages lists the images, which VMs use each, and the leftovers of
// interrupted pulls and imports (ORPHANED). When some VM spec cannot be
// read it still returns the list, with UsedBy nil (unknown), and an error
// wrapping ErrUsageUnknown: callers must not take an image for unused.
func (m *Manager) ListImages(ctx context.Context) ([]Image, error) {
	dir := m.layout().ImagesDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return []Image{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	users, usersErr := m.imageUsers()
	usedBy := func(name string) []string {
		if usersErr != nil {
			return nil
		}
		if u := users[name]; u != nil {
			return u
		}
		return []string{}
	}
	out := []Image{}
	for _, e := range ents {
		var img *Image
		path := filepath.Join(dir, e.Name())
		if name, ok := strings.CutSuffix(e.Name(), ".img.sha256"); ok {
			if img, err = m.image(name); err != nil {
				return nil, err
			}
			if img.VirtualSizeBytes == nil {
				if info, err := m.inspectImage(ctx, img.Path, nil); err == nil {
					img.VirtualSizeBytes = &info.VirtualSize
				} else {
					m.log.Warn("image virtual size unknown", "image", name, "err", err)
				}
			}
		} else if name, ok := strings.CutSuffix(e.Name(), ".img"); ok {
			if _, err := os.Lstat(path + ".sha256"); err == nil {
				continue // listed with its marker
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("image %q: marker: %w", name, err)
			}
			img = &Image{Name: name, Class: ClassOrphaned, Path: path,
				Reason: ReasonIncomplete, Message: "image without a marker (an interrupted pull or import): no VM can use it; garbage collection removes it"}
		} else if name, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "."), ".img.partial"); ok && strings.HasPrefix(e.Name(), ".") {
			img = &Image{Name: name, Class: ClassOrphaned, Path: path,
				Reason: ReasonIncomplete, Message: "partial file of an interrupted pull or import: no VM can use it; garbage collection removes it"}
		} else {
			continue
		}
		st, err := os.Lstat(img.Path)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", img.Name, err)
		}
		if img.Class == ClassOrphaned {
			img.SizeBytes = st.Size()
		}
		img.AllocatedBytes = allocated(st)
		img.UsedBy = usedBy(img.Name)
		out = append(out, *img)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Class < out[j].Class
	})
	return out, usersErr
}

// allocated is the space a file takes on disk (st_blocks is in 512-byte
// units whatever the file system's block size).
func allocated(st fs.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Blocks * 512
	}
	return st.Size()
}

// imageUsers maps image names to the VMs whose disks use them. An
// unreadable spec makes the whole answer unknown: that VM may use any
// image.
func (m *Manager) imageUsers() (map[string][]string, error) {
	vms, errs := m.store.list()
	if len(errs) > 0 {
		return nil, &usageError{errs}
	}
	users := map[string][]string{}
	for _, vm := range vms {
		for _, d := range vm.Spec.Disks {
			if d.Image != "" {
				users[d.Image] = append(users[d.Image], vm.Metadata.Name)
			}
		}
	}
	return users, nil
}

// RemoveImage deletes an image, refused while any VM's disk uses it, while
// any VM spec cannot be read (that VM may use it), and while any disk
// file in the store is an overlay on it (a VM's volumes whose spec is
// gone): overlays read their base on every boot.
func (m *Manager) RemoveImage(ctx context.Context, name string) error {
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return err
	}
	defer g.Release()
	img, err := m.image(name)
	if err != nil {
		return err
	}
	users, err := m.imageUsers()
	if err != nil {
		return fmt.Errorf("image %q: not removed: %w", name, err)
	}
	if u := users[name]; len(u) > 0 {
		return &ImageInUseError{Name: name, VMs: u}
	}
	overlays, err := m.overlaysOn(img.Path)
	if err != nil {
		return fmt.Errorf("image %q: not removed: %w", name, err)
	}
	if len(overlays) > 0 {
		return &ImageInUseError{Name: name, Disks: overlays}
	}
	// marker first: without it the image no longer counts as present
	if err := os.Remove(m.markerPath(name)); err != nil {
		return fmt.Errorf("image %q: %w", name, err)
	}
	if err := os.Remove(m.imagePath(name)); err != nil {
		return fmt.Errorf("image %q: %w", name, err)
	}
	return nil
}

// overlaysOn lists the disk files under the VM state directory whose
// qcow2 backing file is base. A disk that cannot be read fails closed.
func (m *Manager) overlaysOn(base string) ([]string, error) {
	bst, err := os.Stat(base)
	if err != nil {
		return nil, err
	}
	// read every VM directory, failing on one that cannot be read (Glob
	// would skip it, and hide its overlays)
	vmsDir := filepath.Join(m.layout().StateDir(), "vms")
	ents, err := os.ReadDir(vmsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var disks []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(vmsDir, e.Name()))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f.Name(), ".qcow2") {
				disks = append(disks, filepath.Join(vmsDir, e.Name(), f.Name()))
			}
		}
	}
	var out []string
	for _, d := range disks {
		backing, err := qcow2Backing(d)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d, err)
		}
		if backing == "" {
			continue
		}
		if !filepath.IsAbs(backing) {
			backing = filepath.Join(filepath.Dir(d), backing)
		}
		if st, err := os.Stat(backing); err == nil && os.SameFile(st, bst) {
			out = append(out, d)
		}
	}
	return out, nil
}

// PullImage streams url into the store with a running sha256. The bytes go
// to a partial file; the image is renamed into place only when complete
// and verified, and the marker is written last, so a crash at any point
// leaves no usable image. wantSHA, when given, is checked against the
// sha256 of the downloaded bytes.
func (m *Manager) PullImage(ctx context.Context, url, name, wantSHA string, progress ProgressFunc) (*Image, error) {
	var errs []*FieldError
	if fe := ValidateName("name", name); fe != nil {
		errs = append(errs, fe)
	}
	wantSHA = strings.ToLower(strings.TrimSpace(wantSHA))
	if wantSHA != "" && (len(wantSHA) != 64 || strings.Trim(wantSHA, "0123456789abcdef") != "") {
		errs = append(errs, fieldErr("sha256", wantSHA, "must be 64 hex digits"))
	}
	var req *http.Request
	shown := redactURL(url) // errors travel: task failures, the director's store
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		errs = append(errs, fieldErr("url", shown, "must be an http:// or https:// URL"))
	} else {
		var err error
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, url, nil); err != nil {
			errs = append(errs, fieldErr("url", shown, "not a valid URL"))
		}
	}
	if len(errs) > 0 {
		return nil, &ImageError{errs}
	}
	return m.addImage(ctx, name, url, wantSHA, func(w *imageWriter) error {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// *url.Error repeats the URL, query and all
			var ue *neturl.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return fmt.Errorf("download %s: %w", shown, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("download %s: HTTP %s", shown, resp.Status)
		}
		r := &progressReader{r: &ctxReader{ctx: ctx, r: resp.Body}, p: Progress{Image: name, Total: resp.ContentLength}, report: progress}
		if _, err := io.Copy(w, r); err != nil {
			return fmt.Errorf("download %s: %w", shown, err)
		}
		r.done()
		return nil
	})
}

// redactURL is raw as errors may show it: its user info masked and its
// query (presigned URLs carry their signature there) left out. A pull's
// URL comes from the director too, and its errors end in task failures
// that the director stores and shows.
func redactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	if u.User != nil {
		u.User = neturl.User("xxxxx") // a token may be the user name
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "", false
		return u.String() + "?(query not shown)"
	}
	return u.String()
}

// Progress is how far a pull has come: Bytes so far of Total (-1 while
// the server has not said), Done once the last byte is in.
type Progress struct {
	Image string
	Bytes int64
	Total int64
	Done  bool
}

// ProgressFunc receives a pull's progress, at most every progressEvery
// bytes and once when done; nil receives nothing. It is called from the
// pulling goroutine and must not block.
type ProgressFunc func(Progress)

const progressEvery = 4 << 20

type progressReader struct {
	r      io.Reader
	p      Progress
	last   int64
	report ProgressFunc
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.Bytes += int64(n)
	if r.report != nil && r.p.Bytes-r.last >= progressEvery {
		r.last = r.p.Bytes
		r.report(r.p)
	}
	return n, err
}

func (r *progressReader) done() {
	if r.report != nil {
		r.p.Done = true
		r.report(r.p)
	}
}

// URLImageName is the store name of an image given by URL (virt vm create
// --image URL): stable, so the same URL is pulled once.
func URLImageName(url string) string {
	sum := sha256.Sum256([]byte(url))
	return "url-" + hex.EncodeToString(sum[:6])
}

// IsImageURL reports whether an image reference is a URL to pull rather
// than the name of an image in the store.
func IsImageURL(ref string) bool {
	return strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://")
}

// EnsureImage returns the store name for an image reference: a name as it
// is, a URL pulled first (once: an image already pulled from it is used).
// pulled is the image when this call downloaded it, nil otherwise.
func (m *Manager) EnsureImage(ctx context.Context, ref string, progress ProgressFunc) (name string, pulled *Image, err error) {
	if !IsImageURL(ref) {
		return ref, nil, nil
	}
	name = URLImageName(ref)
	img, err := m.PullImage(ctx, ref, name, "", progress)
	switch {
	case errors.Is(err, ErrExists):
		return name, nil, nil
	case err != nil:
		return "", nil, err
	}
	return name, img, nil
}

// ImportImage copies a local qcow2 or raw file into the store. Only a
// regular file is read (a device or a FIFO would never end); its holes
// stay holes.
func (m *Manager) ImportImage(ctx context.Context, file, name string) (*Image, error) {
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	if fe := ValidateName("name", name); fe != nil {
		return nil, &ImageError{[]*FieldError{fe}}
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", file, err)
	}
	src, err := openRegular(abs)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	info, err := m.inspectImage(ctx, file, src)
	if err != nil {
		return nil, err
	}
	st, err := src.Stat()
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", file, err)
	}
	if err := rawWhole(file, file, info, st.Size()); err != nil {
		return nil, err
	}
	return m.addImage(ctx, name, "file://"+abs, "", func(w *imageWriter) error {
		if err := copySparse(ctx, w, src); err != nil {
			return fmt.Errorf("import %s: %w", file, err)
		}
		return nil
	})
}

// rawWhole refuses a raw image whose size is not whole 512-byte sectors:
// a disk is read by sectors, so its tail would be lost to the guest, and
// such a file is most likely no disk image at all (a kernel, an archive).
// size is the file's: qemu-img rounds a raw file's virtual size up. file
// names it in the error, path is where it is read.
//
// A kernel or an initrd is a raw file of any size, and the image store
// holds them too (a director's manifest boots only files in it): those
// are told by their magic (bootFileKind) and kept.
func rawWhole(file, path string, info imgInfo, size int64) error {
	if info.Format != "raw" || size%512 == 0 || bootFileKind(path) != "" {
		return nil
	}
	return &ImageError{[]*FieldError{fieldErr("file", file, fmt.Sprintf(
		"a raw image's size must be a multiple of 512 bytes (its size is %d bytes, %d over); is it a disk image?",
		size, size%512))}}
}

// addImage writes an image through fill into a partial file, verifies it
// and renames it into place; the marker is written last.
func (m *Manager) addImage(ctx context.Context, name, source, wantSHA string, fill func(*imageWriter) error) (*Image, error) {
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return nil, err
	}
	defer g.Release()
	switch _, err := m.image(name); {
	case err == nil:
		return nil, &ImageExistsError{Name: name}
	case !errors.Is(err, ErrNotFound):
		// a marker that cannot be read is an image that may be in use,
		// not a free name: overlays read their base on every boot
		return nil, err
	}
	// an image file without its marker is an interrupted pull or import,
	// unless an overlay of some VM sits on it: then it is a base in use
	if _, err := os.Lstat(m.imagePath(name)); err == nil {
		users, err := m.overlaysOn(m.imagePath(name))
		if err != nil {
			return nil, fmt.Errorf("image %q: cannot tell whether %s is in use: %w", name, m.imagePath(name), err)
		}
		if len(users) > 0 {
			return nil, fmt.Errorf("image %q: %w: %s has no marker but is the base of %s; restore its marker or import under another name",
				name, ErrInUse, m.imagePath(name), strings.Join(users, ", "))
		}
	}
	dir := m.layout().ImagesDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	partial := m.partialPath(name)
	os.Remove(partial) // a leftover of an interrupted pull
	os.Remove(m.imagePath(name))
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(partial)
		}
	}()
	w := newImageWriter(ctx, f)
	if err := fill(w); err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	if err := w.finish(); err != nil {
		return nil, fmt.Errorf("image %q: write %s: %w", name, partial, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("image %q: write %s: %w", name, partial, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("image %q: write %s: %w", name, partial, err)
	}
	n := w.size()
	sum := hex.EncodeToString(w.h.Sum(nil))
	if wantSHA != "" && sum != wantSHA {
		return nil, fmt.Errorf("image %q: %w: got %s, want %s", name, ErrChecksum, sum, wantSHA)
	}
	// what is stored is checked, not only what the source looked like
	info, err := m.inspectImage(ctx, partial, nil)
	if err == nil {
		err = rawWhole(redactURL(source), partial, info, n) // a pull's URL may carry credentials
	}
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	if err := os.Rename(partial, m.imagePath(name)); err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	mk := imageMarker{Name: name, Format: info.Format, SHA256: sum, SizeBytes: n, VirtualSizeBytes: info.VirtualSize,
		Source: source, AddedAt: time.Now().UTC().Truncate(time.Second)}
	b, _ := json.MarshalIndent(mk, "", "  ")
	if err := atomicfile.Write(m.markerPath(name), append(b, '\n'), 0o600); err != nil {
		os.Remove(m.imagePath(name))
		return nil, fmt.Errorf("image %q: marker: %w", name, err)
	}
	ok = true
	img, err := m.image(name)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(img.Path); err == nil {
		img.AllocatedBytes = allocated(st)
	}
	img.UsedBy = []string{}
	return img, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
