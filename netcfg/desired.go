package netcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// The desired file is the operator's network.yaml: what `virt net apply`
// and the DCUI were last told to make the host. It is distinct from
// AppliedFile, virtcon's own record of what it applied. A try writes the
// desired file only when confirmed: until then the new file waits beside it
// (DesiredPendingFile), so that after a rollback the desired file still
// describes the live network. These rules live here so that every front
// end (CLI, DCUI) follows them the same way.

// DesiredFile is the desired host network of layout: <ConfigDir>/network.yaml.
func DesiredFile(layout paths.Layout) string {
	return filepath.Join(layout.ConfigDir(), "network.yaml")
}

// DesiredPendingFile is where a tried desired file waits for its confirm.
func DesiredPendingFile(layout paths.Layout) string { return DesiredFile(layout) + ".pending" }

// LoadDesired returns the configuration to edit: the desired file, else
// the applied record, else an empty configuration. A desired file that
// does not decode is an error (wrapping ErrInvalid).
func LoadDesired(layout paths.Layout) (*Config, error) {
	path := DesiredFile(layout)
	data, err := os.ReadFile(path)
	if err == nil {
		cfg, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return cfg, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("desired network configuration: %w", err)
	}
	if prev, err := LoadApplied(layout); err == nil && prev != nil {
		return prev, nil
	}
	return &Config{APIVersion: APIVersion, Kind: Kind}, nil
}

// DesiredOptions say how ApplyDesired applies.
type DesiredOptions struct {
	// Try, when positive, applies as a try that rolls back after this long
	// unless ConfirmDesired runs first.
	Try time.Duration
	// AtLeast makes Try the least trial: a change that needs a longer one
	// (STP on a bridge with a long forward delay) goes on the least it
	// needs instead of being refused, and Result.Lengthened says why.
	AtLeast bool
	// DryRun only plans: nothing changes and no file is written.
	DryRun bool
	// Data, when set, is the file as the operator wrote it (comments
	// kept): it is decoded instead of the cfg argument (which may be nil)
	// and written byte for byte as the desired file.
	Data []byte
}

// ApplyDesired applies a desired configuration and records it, exactly as
// `virt net apply -f` does. The configuration goes through the same
// admission as a file (marshalled, then Decode), so an edit made in code
// passes the rules a hand-written file does. Without Try it applies and
// then writes DesiredFile (0600, atomically); with Try it snapshots the
// links the new and the previously applied configuration touch, checks
// the deadline (an error wrapping ErrDeadlineTooShort), applies and
// verifies as a Try, and writes DesiredPendingFile, which ConfirmDesired
// turns into the desired file. The Pending is nil unless Try was given.
//
// A try validates the file against the live state before it records
// anything. While a try is pending every apply is refused with a
// *TryPendingError (errors.Is ErrTryPending), a dry run excepted. A dry
// run whose plan the default-route rule refuses returns the plan and the
// refusal.
func ApplyDesired(ctx context.Context, log *slog.Logger, layout paths.Layout, cfg *Config, opts DesiredOptions) (*Result, *Pending, error) {
	res, p, err := applyDesired(ctx, log, layout, cfg, opts)
	var short *DeadlineTooShortError
	if opts.AtLeast && opts.Try > 0 && errors.As(err, &short) && short.Min > opts.Try {
		// refused before anything changed: again, on the least it needs
		opts.Try = short.Min
		res, p, err = applyDesired(ctx, log, layout, cfg, opts)
		if res != nil {
			res.Lengthened = short
		}
	}
	return res, p, err
}

func applyDesired(ctx context.Context, log *slog.Logger, layout paths.Layout, cfg *Config, opts DesiredOptions) (*Result, *Pending, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	data := opts.Data
	if data == nil {
		if cfg == nil {
			return nil, nil, fmt.Errorf("%w: no configuration", ErrInvalid)
		}
		var err error
		if data, err = yaml.Marshal(cfg); err != nil {
			return nil, nil, fmt.Errorf("encode network configuration: %w", err)
		}
	}
	checked, err := Decode(data)
	if err != nil {
		return nil, nil, err
	}
	if !opts.DryRun {
		// before anything else: Apply and Try refuse too, but only after
		// the checks below, whose errors would hide the reason
		if err := CheckNoPendingTry(layout); err != nil {
			return nil, nil, err
		}
	}
	aopts := ApplyOptions{DryRun: opts.DryRun, AllowDefaultRouteChange: opts.Try > 0}
	if opts.Try <= 0 || opts.DryRun {
		res, err := Apply(ctx, log, layout, checked, aopts)
		if err != nil {
			if opts.DryRun {
				return res, nil, err // the plan, with the refusal
			}
			return nil, nil, err
		}
		if !opts.DryRun {
			if err := atomicfile.Write(DesiredFile(layout), data, 0o600); err != nil {
				return res, nil, fmt.Errorf("applied, but recording %s failed: %w", DesiredFile(layout), err)
			}
		}
		return res, nil, nil
	}
	// Snapshot what the new file touches and what the applied one did: a
	// try that removes a bridge must be able to bring it back.
	links := checked.Links()
	if prev, err := LoadApplied(layout); err == nil && prev != nil {
		links = append(links, prev.Links()...)
	}
	slices.Sort(links)
	links = slices.Compact(links)
	// A file the apply would refuse is refused before the try starts: no
	// pending record, no watchdog, no rollback of a change never made.
	live, err := ReadState(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := Validate(checked, live, ValidateOptions{AllowDefaultRouteChange: true}); err != nil {
		return nil, nil, err
	}
	// bridges the file creates with STP count too
	if err := CheckTryDeadline(checked, links, opts.Try); err != nil {
		return nil, nil, err
	}
	verifyFor := max(opts.Try/2, STPConvergence(checked, links))
	var res *Result
	pending, err := tryRun(ctx, log, layout, links,
		func(ctx context.Context) error {
			var err error
			res, err = Apply(ctx, log, layout, checked, aopts)
			return err
		},
		func(ctx context.Context) error { return Verify(ctx, checked, verifyFor) },
		opts.Try, data)
	if err != nil {
		return nil, nil, err
	}
	if err := atomicfile.Write(DesiredPendingFile(layout), data, 0o600); err != nil {
		// The try stands, but cannot be kept: ConfirmDesired refuses a
		// try without its file. The watchdog rolls it back.
		return res, pending, &UnkeepableTryError{Path: DesiredPendingFile(layout), Err: err}
	}
	return res, pending, nil
}

// UnkeepableTryError is a try that started but cannot be kept: its
// desired file (Path) could not be recorded, and ConfirmDesired refuses a
// try without it. The watchdog rolls it back at the deadline; a rollback
// now is the way out.
type UnkeepableTryError struct {
	Path string
	Err  error
}

func (e *UnkeepableTryError) Error() string {
	return fmt.Sprintf("try started, but recording %s failed, so it cannot be kept (it rolls back at the deadline): %v", e.Path, e.Err)
}

func (e *UnkeepableTryError) Unwrap() error { return e.Err }

// TriedFileError refuses to confirm a try whose tried file (Path) is
// missing, or is not the one the try applied: the desired file (Desired)
// would not describe the kept network. Nothing is confirmed; rolling the
// try back and trying again is the way out.
type TriedFileError struct {
	ID, Path, Desired string
	// Missing: the file is gone; otherwise it was changed since, or left
	// by another try.
	Missing bool
}

func (e *TriedFileError) Error() string {
	if e.Missing {
		return fmt.Sprintf("the tried file %s of try %s is missing, so %s would not describe the network: nothing confirmed", e.Path, e.ID, e.Desired)
	}
	return fmt.Sprintf("%s is not the file try %s applied (changed since, or left by another try): nothing confirmed", e.Path, e.ID)
}

// Admit puts an edited configuration through the admission a file gets
// (marshalled, then Decode) and Validate against live (nil: the file
// alone), the way ApplyDesired will: a form can show every problem, by
// field, before anything is applied. It returns the decoded copy.
func Admit(cfg *Config, live *State, opts ValidateOptions) (*Config, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: no configuration", ErrInvalid)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode network configuration: %w", err)
	}
	checked, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := Validate(checked, live, opts); err != nil {
		return nil, err
	}
	return checked, nil
}

// ConfirmDesired keeps the pending try (Confirm) and makes its file the
// desired one. The tried file must be there and be this try's (the one
// ApplyDesired wrote for it): otherwise nothing is confirmed, since
// network.yaml would not follow the kept network.
func ConfirmDesired(ctx context.Context, layout paths.Layout) error {
	return confirmDesired(ctx, layout, nil)
}

// confirmDesired is ConfirmDesired with a check of the pending try (nil:
// any) before the tried file's.
func confirmDesired(ctx context.Context, layout paths.Layout, first func(*Pending) error) error {
	pendingFile := DesiredPendingFile(layout)
	check := func(p *Pending) error {
		if first != nil {
			if err := first(p); err != nil {
				return err
			}
		}
		data, err := os.ReadFile(pendingFile)
		if errors.Is(err, fs.ErrNotExist) {
			return &TriedFileError{ID: p.ID, Path: pendingFile, Desired: DesiredFile(layout), Missing: true}
		}
		if err != nil {
			return fmt.Errorf("the tried file of try %s: %w: nothing confirmed", p.ID, err)
		}
		if !p.ownsDesired(data) {
			return &TriedFileError{ID: p.ID, Path: pendingFile, Desired: DesiredFile(layout)}
		}
		return nil
	}
	return confirm(ctx, layout, check, func() error { return os.Rename(pendingFile, DesiredFile(layout)) })
}

// LoadEffective returns the configuration the host is meant to have now,
// the one "test management network" checks: while a try is pending, the
// file on trial (DesiredPendingFile, when it is that try's; else the
// applied record, which the try wrote), otherwise LoadDesired.
func LoadEffective(layout paths.Layout) (*Config, error) {
	p, err := PendingTry(layout)
	if errors.Is(err, ErrNoPendingTry) {
		return LoadDesired(layout)
	}
	if err != nil {
		return nil, err
	}
	path := DesiredPendingFile(layout)
	data, err := os.ReadFile(path)
	switch {
	case err == nil && p.ownsDesired(data):
		cfg, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return cfg, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("network configuration on trial: %w", err)
	}
	if cfg, err := LoadApplied(layout); err != nil || cfg != nil {
		return cfg, err
	}
	return LoadDesired(layout)
}

// LoadDesiredOrFallback is LoadDesired for the way back from a broken
// configuration (`virt net reset-dhcp`, the DCUI's DHCP reset): when the
// desired file cannot be read or decoded, it returns the applied record,
// else an empty configuration, with why: a sentence naming the error and
// what it started from instead, for the operator. why is "" when the
// desired file loaded.
func LoadDesiredOrFallback(layout paths.Layout) (cfg *Config, why string) {
	cfg, err := LoadDesired(layout)
	if err == nil {
		return cfg, ""
	}
	prev, aerr := LoadApplied(layout)
	switch {
	case aerr == nil && prev != nil:
		return prev, fmt.Sprintf("%v; starting from the applied configuration %s instead", err, AppliedFile(layout))
	case aerr != nil:
		return &Config{APIVersion: APIVersion, Kind: Kind}, fmt.Sprintf("%v; and %v; starting from an empty configuration instead", err, aerr)
	}
	return &Config{APIVersion: APIVersion, Kind: Kind}, fmt.Sprintf("%v; starting from an empty configuration instead", err)
}

// RollbackDesired undoes the pending try now (Rollback) and drops its
// file: the desired file still describes the restored network.
func RollbackDesired(ctx context.Context, layout paths.Layout) error {
	if err := Rollback(ctx, layout); err != nil {
		return err
	}
	// The restore removed it already; a leftover would be harmless (a
	// confirm checks the file is its try's, the next try removes it) and
	// the rollback itself succeeded.
	_ = os.Remove(DesiredPendingFile(layout))
	return nil
}
