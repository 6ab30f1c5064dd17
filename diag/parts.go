package diag

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/buildinfo"
	"github.com/virtcon/virtcon/paths"
)

// HostParts are the parts of the host bundle, the one `virt diagnostics`
// and the DCUI's Diagnostics screen write: versions.json, inventory.json
// and checks.json (errors.json is added by Write). opts.Probe decides how
// the KVM probe runs for checks.json: nil runs it afresh (the CLI), a
// hostinfo.CachedProbe answers from this boot's cache (the DCUI). The
// inventory is collected once and shared by the parts that need it.
func HostParts(opts hostinfo.CheckOptions) []Part {
	var (
		mu  sync.Mutex
		inv *hostinfo.Inventory
	)
	collect := func(ctx context.Context) (*hostinfo.Inventory, error) {
		mu.Lock()
		defer mu.Unlock()
		if inv != nil {
			return inv, nil
		}
		i, err := hostinfo.Collect(ctx, opts.Options)
		if err != nil {
			return nil, err
		}
		inv = i
		return inv, nil
	}
	return []Part{
		{Name: "versions.json", Collect: func(context.Context) (any, error) {
			return map[string]any{"virt": buildinfo.Get(), "goos": runtime.GOOS, "goarch": runtime.GOARCH, "generated": time.Now().UTC()}, nil
		}},
		{Name: "inventory.json", Collect: func(ctx context.Context) (any, error) { return collect(ctx) }},
		{Name: "checks.json", Collect: func(ctx context.Context) (any, error) {
			i, err := collect(ctx)
			if err != nil {
				return nil, err
			}
			return hostinfo.RunChecks(ctx, i, opts), nil
		}},
	}
}

// Dir is where the DCUI keeps the bundles it writes.
func Dir(l paths.Layout) string { return filepath.Join(l.StateDir(), "diagnostics") }

// FileName is a bundle's default name for the time it is written:
// virtcon-diagnostics-20260314T092653Z.tar.gz (UTC).
func FileName(t time.Time) string {
	return "virtcon-diagnostics-" + t.UTC().Format("20060102T150405Z") + ".tar.gz"
}

// Result says what WriteInDir wrote.
type Result struct {
	// Path is the bundle file; Size its size in bytes.
	Path string
	Size int64
	// Files are the documents inside, in order (errors.json last).
	Files []string
}

// WriteInDir writes the bundle of parts as FileName(now) in dir. The
// directory is created, and tightened if it exists, to mode 0700: bundles
// describe the host and are readable by root only (files 0600).
func WriteInDir(ctx context.Context, log *slog.Logger, dir string, now time.Time, parts []Part) (Result, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("diagnostics: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("diagnostics: %w", err)
	}
	path := filepath.Join(dir, FileName(now))
	names, err := Write(ctx, log, path, parts)
	if err != nil {
		return Result{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return Result{}, fmt.Errorf("diagnostics: %w", err)
	}
	return Result{Path: path, Size: st.Size(), Files: names}, nil
}
