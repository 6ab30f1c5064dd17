package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// Image is a base image in the store. It exists only with its marker,
// which is written last.
type Image struct {
	Name      string    `json:"name" yaml:"name"`
	Path      string    `json:"path" yaml:"path"`
	Format    string    `json:"format" yaml:"format"`
	SHA256    string    `json:"sha256" yaml:"sha256"`
	SizeBytes int64     `json:"sizeBytes" yaml:"sizeBytes"`
	Source    string    `json:"source" yaml:"source"`
	AddedAt   time.Time `json:"addedAt" yaml:"addedAt"`
	UsedBy    []string  `json:"usedBy" yaml:"usedBy"`
}

// ErrInUse is returned when removing an image that VMs use.
var ErrInUse = errors.New("in use")

// ErrChecksum is returned when a download does not match its sha256.
var ErrChecksum = errors.New("sha256 mismatch")

func (m *Manager) imagePath(name string) string {
	return filepath.Join(m.layout().ImagesDir(), name+".img")
}
func (m *Manager) markerPath(name string) string { return m.imagePath(name) + ".sha256" }

// image returns a complete image (one with a marker).
func (m *Manager) image(name string) (*Image, error) {
	b, err := os.ReadFile(m.markerPath(name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("image %q: %w (virt image pull or virt image import)", name, ErrNotFound)
		}
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image %q: corrupt marker: %w", name, err)
	}
	img.Path = m.imagePath(name)
	return &img, nil
}

// ListImages lists complete images and which VMs use each.
func (m *Manager) ListImages() ([]Image, error) {
	ents, err := os.ReadDir(m.layout().ImagesDir())
	if errors.Is(err, os.ErrNotExist) {
		return []Image{}, nil
	}
	if err != nil {
		return nil, err
	}
	users := m.imageUsers()
	out := []Image{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".img.sha256")
		if !ok {
			continue
		}
		img, err := m.image(name)
		if err != nil {
			return nil, err
		}
		img.UsedBy = users[name]
		if img.UsedBy == nil {
			img.UsedBy = []string{}
		}
		out = append(out, *img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *Manager) imageUsers() map[string][]string {
	users := map[string][]string{}
	vms, _ := m.store.list()
	for _, vm := range vms {
		for _, d := range vm.Spec.Disks {
			if d.Image != "" {
				users[d.Image] = append(users[d.Image], vm.Metadata.Name)
			}
		}
	}
	return users
}

// RemoveImage deletes an image, refused while any VM's disk uses it:
// overlays read their base on every boot.
func (m *Manager) RemoveImage(ctx context.Context, name string) error {
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return err
	}
	defer g.Release()
	if _, err := m.image(name); err != nil {
		return err
	}
	if users := m.imageUsers()[name]; len(users) > 0 {
		return fmt.Errorf("image %q: %w by %s", name, ErrInUse, strings.Join(users, ", "))
	}
	// marker first: without it the image no longer counts as present
	if err := os.Remove(m.markerPath(name)); err != nil {
		return err
	}
	return os.Remove(m.imagePath(name))
}

// PullImage streams url into the store with a running sha256. The bytes go
// to a partial file; the image is renamed into place only when complete
// and verified, and the marker is written last, so a crash at any point
// leaves no usable image.
func (m *Manager) PullImage(ctx context.Context, url, name, wantSHA string, progress io.Writer) (*Image, error) {
	if fe := ValidateName("--name", name); fe != nil {
		return nil, &ValidationError{[]*FieldError{fe}}
	}
	wantSHA = strings.ToLower(strings.TrimSpace(wantSHA))
	if wantSHA != "" && (len(wantSHA) != 64 || strings.Trim(wantSHA, "0123456789abcdef") != "") {
		return nil, &ValidationError{[]*FieldError{{"--sha256", wantSHA, "must be 64 hex digits"}}}
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, &ValidationError{[]*FieldError{{"url", url, "must be an http:// or https:// URL"}}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, &ValidationError{[]*FieldError{{"url", url, err.Error()}}}
	}
	return m.addImage(ctx, name, url, wantSHA, progress, func() (io.ReadCloser, error) {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("download %s: %w", url, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("download %s: HTTP %s", url, resp.Status)
		}
		return resp.Body, nil
	})
}

// ImportImage copies a local qcow2 or raw file into the store.
func (m *Manager) ImportImage(ctx context.Context, file, name string) (*Image, error) {
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	if fe := ValidateName("--name", name); fe != nil {
		return nil, &ValidationError{[]*FieldError{fe}}
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if _, err := m.inspectImage(ctx, abs); err != nil {
		return nil, err
	}
	return m.addImage(ctx, name, "file://"+abs, "", nil, func() (io.ReadCloser, error) { return os.Open(abs) })
}

func (m *Manager) addImage(ctx context.Context, name, source, wantSHA string, progress io.Writer, open func() (io.ReadCloser, error)) (*Image, error) {
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return nil, err
	}
	defer g.Release()
	if _, err := m.image(name); err == nil {
		return nil, fmt.Errorf("image %q: %w (virt image rm %s first)", name, ErrExists, name)
	}
	dir := m.layout().ImagesDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	partial := filepath.Join(dir, "."+name+".img.partial")
	os.Remove(partial) // a leftover of an interrupted pull
	os.Remove(m.imagePath(name))
	src, err := open()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(partial)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), &ctxReader{ctx: ctx, r: src})
	if err != nil {
		return nil, fmt.Errorf("image %q: copy from %s: %w", name, source, err)
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if wantSHA != "" && sum != wantSHA {
		return nil, fmt.Errorf("image %q: %w: got %s, want %s", name, ErrChecksum, sum, wantSHA)
	}
	info, err := m.inspectImage(ctx, partial)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	if err := os.Rename(partial, m.imagePath(name)); err != nil {
		return nil, err
	}
	img := &Image{Name: name, Path: m.imagePath(name), Format: info.Format, SHA256: sum, SizeBytes: n, Source: source, AddedAt: time.Now().UTC().Truncate(time.Second)}
	b, _ := json.MarshalIndent(img, "", "  ")
	if err := atomicfile.Write(m.markerPath(name), append(b, '\n'), 0o600); err != nil {
		os.Remove(m.imagePath(name))
		return nil, err
	}
	ok = true
	if progress != nil {
		fmt.Fprintf(progress, "image %s: %d bytes, sha256 %s\n", name, n, sum)
	}
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
