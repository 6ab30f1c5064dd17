package network

import (
	"context"

	"github.com/virtcon/virtcon/netcfg"
)

// Sources is what the screen reads and changes: the host's network
// service (*netcfg.Service, host.Host.Net) in production, fakes in tests.
// Every method is called from a tea.Cmd.
type Sources interface {
	// LoadDesired is the configuration to edit (netcfg.LoadDesired).
	LoadDesired() (*netcfg.Config, error)
	// LoadDesiredOrFallback is what the DHCP reset starts from when the
	// desired file does not load, and why (netcfg.LoadDesiredOrFallback).
	LoadDesiredOrFallback() (*netcfg.Config, string)
	// LoadEffective is the configuration the management check checks:
	// the one on trial while a try is pending (netcfg.LoadEffective).
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
	ConfirmDesired(ctx context.Context) error
	// RollbackDesired undoes the change on trial now.
	RollbackDesired(ctx context.Context) error
	// CheckManagement runs "test management network" for cfg.
	CheckManagement(ctx context.Context, cfg *netcfg.Config, opts netcfg.CheckOptions) []netcfg.CheckResult
	// NICs lists the host's physical network interfaces.
	NICs(ctx context.Context) ([]string, error)
}

var _ Sources = (*netcfg.Service)(nil)
