package diag

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/redact"
)

// Part is one document of the bundle.
type Part struct {
	Name    string // file name inside the bundle, e.g. "inventory.json"
	Collect func(ctx context.Context) (any, error)
}

// Write collects every part and writes the bundle to path (mode 0600,
// atomically). It returns the names of the files in the bundle.
func Write(ctx context.Context, log *slog.Logger, path string, parts []Part) ([]string, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	now := time.Now().UTC()
	errs := map[string]string{}
	var names []string
	add := func(name string, v any) error {
		safe, err := redact.Value(v)
		if err != nil {
			return fmt.Errorf("diagnostics: %s: %w", name, err)
		}
		b, err := json.MarshalIndent(safe, "", "  ")
		if err != nil {
			return fmt.Errorf("diagnostics: %s: %w", name, err)
		}
		b = append(b, '\n')
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		names = append(names, name)
		return err
	}
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("diagnostics: %w", err)
		}
		v, err := p.Collect(ctx)
		if err != nil {
			log.Warn("diagnostics: part failed", "part", p.Name, "err", err)
			errs[p.Name] = redact.Text(err.Error())
			continue
		}
		if err := add(p.Name, v); err != nil {
			return nil, err
		}
	}
	if err := add("errors.json", errs); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("diagnostics: %w", err)
	}
	return names, nil
}
