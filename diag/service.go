package diag

import (
	"context"
	"log/slog"
	"time"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/paths"
)

// Service writes the host's support bundle, the same parts wherever it is
// asked for.
type Service struct {
	layout paths.Layout
	log    *slog.Logger
	info   *hostinfo.Assessor
}

// NewService returns the diagnostics service over info's view of the host.
func NewService(layout paths.Layout, log *slog.Logger, info *hostinfo.Assessor) *Service {
	return &Service{layout: layout, log: log, info: info}
}

// Parts are the bundle's parts. freshProbe runs the KVM probe for
// checks.json (the CLI, as `virt host check` does); otherwise it is
// answered from this boot's cache (a screen that must not run guest code).
func (s *Service) Parts(freshProbe bool) []Part {
	return HostParts(s.info.CheckOptions(hostinfo.CheckRequest{Fresh: freshProbe}))
}

// Write writes the bundle to path (mode 0600) and returns the names of
// the documents inside.
func (s *Service) Write(ctx context.Context, path string, freshProbe bool) ([]string, error) {
	return Write(ctx, s.log, path, s.Parts(freshProbe))
}

// WriteInDir writes a bundle named for now into Dir, as the DCUI does.
func (s *Service) WriteInDir(ctx context.Context, now time.Time) (Result, error) {
	return WriteInDir(ctx, s.log, Dir(s.layout), now, s.Parts(false))
}

// Dir is where WriteInDir writes.
func (s *Service) Dir() string { return Dir(s.layout) }
