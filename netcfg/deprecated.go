package netcfg

import "context"

// The old names of the management check, kept until tui/network has
// switched to the new ones; then this file goes.

// TestResult is CheckResult.
//
// Deprecated: use CheckResult.
type TestResult = CheckResult

// TestOptions is CheckOptions.
//
// Deprecated: use CheckOptions.
type TestOptions = CheckOptions

// DefaultTestTimeout is DefaultCheckTimeout.
//
// Deprecated: use DefaultCheckTimeout.
const DefaultTestTimeout = DefaultCheckTimeout

// TestManagement is CheckManagement.
//
// Deprecated: use CheckManagement (or Service.CheckManagement).
func TestManagement(ctx context.Context, cfg *Config, opts CheckOptions) []CheckResult {
	return CheckManagement(ctx, cfg, opts)
}

// TestManagement is CheckManagement with the default options.
//
// Deprecated: use CheckManagement.
func (s *Service) TestManagement(ctx context.Context, cfg *Config) []CheckResult {
	return s.CheckManagement(ctx, cfg, CheckOptions{})
}
