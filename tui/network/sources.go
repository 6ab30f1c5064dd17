package network

import (
	"context"
	"errors"
	"log/slog"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
)

// Sources is what the screen reads and changes; netcfg through
// LiveSources, fakes in tests. Every method is called from a tea.Cmd.
type Sources interface {
	// LoadDesired is the configuration to edit (netcfg.LoadDesired).
	LoadDesired() (*netcfg.Config, error)
	// LoadDesiredOrFallback is what the DHCP reset starts from when the
	// desired file does not load, and why (netcfg.LoadDesiredOrFallback).
	LoadDesiredOrFallback() (*netcfg.Config, string)
	// LoadEffective is the configuration the management test checks: the
	// one on trial while a try is pending (netcfg.LoadEffective).
	LoadEffective() (*netcfg.Config, error)
	// LoadApplied is the last applied configuration, nil if none.
	LoadApplied() (*netcfg.Config, error)
	// ReadState reads the live links, addresses and routes.
	ReadState(ctx context.Context) (*netcfg.State, error)
	// PendingTry is the change on trial, nil when none.
	PendingTry() (*netcfg.Pending, error)
	// ApplyDesired applies and records cfg (netcfg.ApplyDesired).
	ApplyDesired(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error)
	// ConfirmDesired keeps the change on trial.
	ConfirmDesired() error
	// RollbackDesired undoes the change on trial now.
	RollbackDesired(ctx context.Context) error
	// TestManagement runs "test management network" for cfg.
	TestManagement(ctx context.Context, cfg *netcfg.Config) []netcfg.TestResult
	// NICs lists the host's physical network interfaces.
	NICs(ctx context.Context) ([]string, error)
}

// LiveSources works on the real host: files under layout, links by
// netlink in this process's network namespace.
func LiveSources(layout paths.Layout, log *slog.Logger) Sources {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return live{layout: layout, log: log}
}

type live struct {
	layout paths.Layout
	log    *slog.Logger
}

func (l live) LoadDesired() (*netcfg.Config, error) { return netcfg.LoadDesired(l.layout) }
func (l live) LoadDesiredOrFallback() (*netcfg.Config, string) {
	return netcfg.LoadDesiredOrFallback(l.layout)
}
func (l live) LoadEffective() (*netcfg.Config, error) { return netcfg.LoadEffective(l.layout) }
func (l live) LoadApplied() (*netcfg.Config, error)   { return netcfg.LoadApplied(l.layout) }
func (l live) ReadState(ctx context.Context) (*netcfg.State, error) {
	return netcfg.ReadState(ctx)
}

func (l live) PendingTry() (*netcfg.Pending, error) {
	p, err := netcfg.PendingTry(l.layout)
	if errors.Is(err, netcfg.ErrNoPendingTry) {
		return nil, nil
	}
	return p, err
}

func (l live) ApplyDesired(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error) {
	return netcfg.ApplyDesired(ctx, l.log, l.layout, cfg, opts)
}

func (l live) ConfirmDesired() error { return netcfg.ConfirmDesired(l.layout) }
func (l live) RollbackDesired(ctx context.Context) error {
	return netcfg.RollbackDesired(ctx, l.layout)
}

func (l live) TestManagement(ctx context.Context, cfg *netcfg.Config) []netcfg.TestResult {
	return netcfg.TestManagement(ctx, cfg, netcfg.TestOptions{Root: l.layout.Root})
}

func (l live) NICs(ctx context.Context) ([]string, error) {
	st, err := netcfg.ReadState(ctx)
	if err != nil {
		return nil, err
	}
	return st.NICs(), nil
}
