package netcfg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/virtcon/virtcon/paths"
)

// Service is the host network as every face drives it (the CLI, the
// DCUI's Network and status screens, the agent): the desired file
// (network.yaml) and its rules, applied live with try/confirm/rollback.
// It holds no state between calls beyond its configuration; the record of
// a try lives in files, so two processes see the same truth.
type Service struct {
	layout paths.Layout
	log    *slog.Logger
}

// NewService returns the network service for the files under layout,
// acting on this process's network namespace.
func NewService(layout paths.Layout, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{layout: layout, log: log}
}

// DesiredFile is network.yaml under the service's layout.
func (s *Service) DesiredFile() string { return DesiredFile(s.layout) }

// LoadDesired is the configuration to edit (LoadDesired).
func (s *Service) LoadDesired() (*Config, error) { return LoadDesired(s.layout) }

// LoadDesiredOrFallback is what a DHCP reset starts from when the desired
// file does not load, and why (LoadDesiredOrFallback).
func (s *Service) LoadDesiredOrFallback() (*Config, string) { return LoadDesiredOrFallback(s.layout) }

// LoadEffective is the configuration the host is meant to have now: the
// one on trial while a try is pending (LoadEffective).
func (s *Service) LoadEffective() (*Config, error) { return LoadEffective(s.layout) }

// LoadApplied is the last applied configuration, nil if none.
func (s *Service) LoadApplied() (*Config, error) { return LoadApplied(s.layout) }

// ReadState reads the live links, addresses and routes.
func (s *Service) ReadState(ctx context.Context) (*State, error) { return ReadState(ctx) }

// NICs lists the host's physical network interfaces.
func (s *Service) NICs(ctx context.Context) ([]string, error) {
	st, err := ReadState(ctx)
	if err != nil {
		return nil, err
	}
	return st.NICs(), nil
}

// PendingTry is the change on trial, nil when there is none. A record
// that cannot be read is an error, never "none". It only reads: any
// console may ask, read-only ones too.
func (s *Service) PendingTry() (*Pending, error) {
	p, err := PendingTry(s.layout)
	if errors.Is(err, ErrNoPendingTry) {
		return nil, nil
	}
	return p, err
}

// DropStalePending removes the tried file of a try that is no longer
// pending (its watchdog rolled it back; a confirm would refuse the file
// anyway). Under the try's lock, re-checked there: a confirm renames the
// file after it removed the record, and must find it. A lock held by
// someone (busy) is no error: the holder is at the try, nothing is stale.
func (s *Service) DropStalePending(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	unlock, err := tryLockCtx(ctx, PendingPath(s.layout))
	if errors.Is(err, ErrTryBusy) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := PendingTry(s.layout); !errors.Is(err, ErrNoPendingTry) {
		return nil // pending (or unreadable): not stale
	}
	if err := os.Remove(DesiredPendingFile(s.layout)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stale tried file: %w", err)
	}
	return nil
}

// CheckNoPendingTry returns a *TryPendingError while a try is pending:
// what a face asks before it offers a change.
func (s *Service) CheckNoPendingTry() error { return CheckNoPendingTry(s.layout) }

// ResolveExpiredTry rolls back a try whose deadline passed while its
// watchdog is dead, and says what it did (ResolveExpiredTry).
func (s *Service) ResolveExpiredTry(ctx context.Context) (*ResolvedTry, error) {
	return ResolveExpiredTry(ctx, s.log, s.layout)
}

// ApplyDesired applies and records cfg, or opts.Data (ApplyDesired).
func (s *Service) ApplyDesired(ctx context.Context, cfg *Config, opts DesiredOptions) (*Result, *Pending, error) {
	return ApplyDesired(ctx, s.log, s.layout, cfg, opts)
}

// ConfirmDesired keeps the change on trial.
func (s *Service) ConfirmDesired(ctx context.Context) error { return ConfirmDesired(ctx, s.layout) }

// RollbackDesired undoes the change on trial now.
func (s *Service) RollbackDesired(ctx context.Context) error { return RollbackDesired(ctx, s.layout) }

// CheckManagement checks the management network of cfg
// (CheckManagement); opts.Root defaults to the service's layout root.
func (s *Service) CheckManagement(ctx context.Context, cfg *Config, opts CheckOptions) []CheckResult {
	if opts.Root == "" {
		opts.Root = s.layout.Root
	}
	return CheckManagement(ctx, cfg, opts)
}

// PlanDesired is what applying network.yaml would change on the live
// host now: a dry run, with the default-route rule relaxed (a plan is
// shown, not refused). An absent network.yaml is an empty configuration,
// so the plan shows what an apply of nothing would remove.
func (s *Service) PlanDesired(ctx context.Context) (*Result, error) {
	cfg := &Config{APIVersion: APIVersion, Kind: Kind}
	data, err := os.ReadFile(s.DesiredFile())
	switch {
	case err == nil:
		if cfg, err = Decode(data); err != nil {
			return nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	return Apply(ctx, s.log, s.layout, cfg, ApplyOptions{DryRun: true, AllowDefaultRouteChange: true})
}

// DefaultResetDHCPTry is how long a DHCP reset stays on trial by default.
const DefaultResetDHCPTry = 60 * time.Second

// ErrResetNeedsTry is returned for a DHCP reset without a trial period.
var ErrResetNeedsTry = errors.New("a DHCP reset is always a try: switching the management interface can cut off the session that asked for it, with nothing to roll it back")

// ResetDHCP makes the management interface DHCP on the NIC iface and
// applies it on trial for try. It is always a try (try <= 0 is
// ErrResetNeedsTry, wrapped with ErrInvalid): the switch can cut off the
// session that asked for it. It starts from network.yaml or, when that
// does not load, from the applied configuration, and says so in why.
func (s *Service) ResetDHCP(ctx context.Context, iface string, try time.Duration) (res *Result, p *Pending, why string, err error) {
	if try <= 0 {
		return nil, nil, "", fmt.Errorf("%w: %w (got a trial of %v)", ErrInvalid, ErrResetNeedsTry, try)
	}
	cfg, why := s.LoadDesiredOrFallback()
	st, err := ReadState(ctx)
	if err != nil {
		return nil, nil, why, err
	}
	cfg, err = ResetManagementDHCP(cfg, iface, st)
	if err != nil {
		return nil, nil, why, err
	}
	res, p, err = s.ApplyDesired(ctx, cfg, DesiredOptions{Try: try})
	return res, p, why, err
}

// BridgeStatus is one bridge of the host as `virt net bridge list` and the
// DCUI show it.
type BridgeStatus struct {
	Name      string   `json:"name" yaml:"name"`
	Ports     []string `json:"ports" yaml:"ports"`
	Addresses []string `json:"addresses" yaml:"addresses"`
	MTU       int      `json:"mtu" yaml:"mtu"`
	Up        bool     `json:"up" yaml:"up"`
	STP       bool     `json:"stp" yaml:"stp"`
	// Managed: the applied configuration made it (a bridge of its own or
	// a NAT network's); others are the host's, left alone.
	Managed bool `json:"managed" yaml:"managed"`
}

// Bridges lists the host's bridges with their ports and addresses, and
// whether virtcon manages each.
func (s *Service) Bridges(ctx context.Context) ([]BridgeStatus, error) {
	st, err := ReadState(ctx)
	if err != nil {
		return nil, err
	}
	prev, err := LoadApplied(s.layout)
	if err != nil {
		return nil, err
	}
	return bridgeStatuses(st, prev), nil
}

// bridgeStatuses lists the bridges of st; those that applied (the last
// applied configuration, may be nil) made are Managed.
func bridgeStatuses(st *State, prev *Config) []BridgeStatus {
	managed := map[string]bool{}
	if prev != nil {
		for _, b := range prev.Bridges {
			managed[b.Name] = true
		}
		for _, n := range prev.Networks {
			managed[n.Bridge] = true
		}
	}
	rows := []BridgeStatus{}
	for _, l := range st.Links {
		if l.Type != "bridge" {
			continue
		}
		r := BridgeStatus{Name: l.Name, MTU: l.MTU, Up: l.Up, STP: l.STP, Managed: managed[l.Name], Ports: []string{}, Addresses: []string{}}
		for _, p := range st.Links {
			if p.Master == l.Name {
				r.Ports = append(r.Ports, p.Name)
			}
		}
		for _, a := range l.Addresses {
			r.Addresses = append(r.Addresses, a.String())
		}
		rows = append(rows, r)
	}
	return rows
}
