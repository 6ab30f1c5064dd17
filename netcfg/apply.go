package netcfg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/revert"
	"github.com/virtcon/virtcon/paths"
)

// ApplyOptions change how Apply works.
type ApplyOptions struct {
	// AllowDefaultRouteChange permits changes that move or remove the
	// host's default route (see ValidateOptions); the CLI sets it for
	// --try.
	AllowDefaultRouteChange bool
	// DryRun plans without changing anything or recording the file.
	DryRun bool

	// afterStep, for tests, runs after each step; an error fails the
	// apply as if that step had.
	afterStep func(i int, desc string) error
}

// Result says what an apply did.
type Result struct {
	// Steps are the descriptions of the steps run (with DryRun, to run).
	Steps []string `json:"steps"`
	// Changed is true when the host differed from the configuration: steps
	// ran (with DryRun, would run).
	Changed bool `json:"changed"`
	// Lengthened, for an ApplyDesired with AtLeast, is why the trial is
	// longer than asked for (its Min is the trial taken); nil otherwise.
	Lengthened *DeadlineTooShortError `json:"-"`
}

// AppliedFile is where the last applied configuration is recorded: a
// later apply deletes only what this file had and the new one lacks.
func AppliedFile(layout paths.Layout) string {
	return filepath.Join(layout.NetworkDir(), "applied.yaml")
}

// LoadApplied reads the last applied configuration; nil, nil when there is
// none.
func LoadApplied(layout paths.Layout) (*Config, error) {
	path := AppliedFile(layout)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("applied network configuration: %w", err)
	}
	cfg, err := Decode(data)
	if err != nil {
		// Not ErrInvalid: the operator's file is not at fault, virtcon's
		// record is (edited by hand, or a disk fault).
		return nil, fmt.Errorf("applied network configuration %s is damaged: %v", path, err)
	}
	return cfg, nil
}

// Apply makes the host network, in the network namespace of the calling
// thread, what cfg describes. It validates cfg against the live state,
// plans the differences from it (and from the previously applied
// configuration, for deletions), runs each step with its undo on a revert
// stack, and records cfg in AppliedFile. On any failure it undoes every
// step already done and returns a *StepError naming the failed step.
// Applying the same configuration again does nothing (zero steps).
//
// DNS servers and search domains are written to <root>/etc/resolv.conf,
// the hostname to <root>/etc/hostname (and set in the kernel when the
// root is /). With management DHCP, a detached DHCP client (this program,
// the "dhcp-client" child mode) is started unless one runs, and Apply waits for
// its first lease. Dropping DHCP (or moving it to another interface)
// stops the client before any step, and the steps are planned again
// against what it left: stopping it deletes the leased address, and the
// kernel the secondary addresses of its subnet with it.
//
// While a try is pending Apply refuses (a *TryPendingError), except as
// the try's own apply: a change on top of a trial would outlive its
// rollback. Applies are serialised by a lock per host root.
//
// With DryRun nothing changes and nothing is locked; a plan that the
// default-route rule refuses comes back with that refusal (a
// *ValidationError): both the Result and the error are set.
func Apply(ctx context.Context, log *slog.Logger, layout paths.Layout, cfg *Config, opts ApplyOptions) (*Result, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: no configuration", ErrInvalid)
	}
	if !opts.DryRun && !isTryApply(ctx) {
		// one apply at a time per host root: two interleaved plans would
		// each undo the other's steps (a try's own apply runs under the
		// lock its tryRun holds)
		unlock, err := applyLock(ctx, layout)
		if err != nil {
			return nil, err
		}
		defer unlock()
		// and none on top of a try: its rollback would not undo it
		if err := CheckNoPendingTry(layout); err != nil {
			return nil, err
		}
	}
	prev, err := LoadApplied(layout)
	if err != nil {
		return nil, err
	}
	h, err := openHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	live, err := h.readState(ctx)
	if err != nil {
		return nil, err
	}
	// A dry run plans what the default-route rule would refuse too, and
	// returns the refusal with the plan.
	if err := Validate(cfg, live, ValidateOptions{AllowDefaultRouteChange: opts.AllowDefaultRouteChange || opts.DryRun}); err != nil {
		return nil, err
	}
	var risky []*FieldError
	if !opts.AllowDefaultRouteChange && opts.DryRun {
		// valid otherwise: what is left is the rule's (enslaving the
		// interface that carries the default route)
		var ve *ValidationError
		if err := Validate(cfg, live, ValidateOptions{}); errors.As(err, &ve) {
			risky = append(risky, ve.Errs...)
		} else if err != nil {
			return nil, err
		}
	}
	steps := Plan(cfg, live, prev)
	var refused error
	if !opts.AllowDefaultRouteChange {
		for _, st := range steps {
			if st.risk != nil {
				fe := *st.risk
				risky = append(risky, &fe)
			}
		}
		if len(risky) > 0 {
			refused = invalid(risky)
			if !opts.DryRun {
				return nil, refused
			}
		}
	}
	added, removed := natChanges(cfg, prev)
	wantDHCP, hadDHCP := dhcpIface(cfg), dhcpIface(prev)
	if opts.DryRun {
		// in the order Apply runs them: a DHCP client that goes is
		// stopped first, and the address steps are then planned again
		// from what its lease leaves behind
		res := &Result{Steps: make([]string, 0, len(steps))}
		var starts []string
		for _, d := range dhcpPlan(layout, cfg, prev) {
			if strings.HasPrefix(d, "stop ") {
				res.Steps = append(res.Steps, d+" (its lease's address and routes go; the steps below are planned again after it)")
			} else {
				starts = append(starts, d)
			}
		}
		for _, st := range steps {
			res.Steps = append(res.Steps, st.Desc)
		}
		res.Steps = append(res.Steps, natSteps(added, removed)...)
		res.Steps = append(res.Steps, starts...)
		res.Changed = len(res.Steps) > 0
		// the plan is shown even when the default-route rule refuses it,
		// with the refusal the apply would get
		return res, refused
	}

	res := &Result{Steps: make([]string, 0, len(steps)+1)}
	r := revert.New()
	fail := func(i int, desc string, err error) (*Result, error) {
		rerr := r.Fail()
		log.Error("network apply failed; reverted", "step", desc, "err", err, "revertErr", rerr)
		return nil, &StepError{Index: i, Step: desc, Err: err, RevertErr: rerr}
	}
	// A DHCP client that goes is stopped first, and the plan made again
	// against what it left: stopping it deletes the leased address and,
	// with it, every secondary address of that subnet (unless the link
	// promotes secondaries), so a static address planned beside the lease
	// (or equal to it, so planned as present) would be lost with it. The
	// risk gate above has judged the change from the live state, lease
	// included; the new plan differs only by what the client took.
	if hadDHCP != "" && hadDHCP != wantDHCP {
		desc := "stop DHCP client on " + hadDHCP
		stopped, err := stopDHCPClient(layout, hadDHCP)
		if err != nil {
			return fail(0, desc, err)
		}
		if stopped {
			res.Steps = append(res.Steps, desc)
			r.Add(func() error {
				_, err := ensureDHCPClient(context.WithoutCancel(ctx), log, layout, hadDHCP)
				return err
			})
			log.Info("network step", "step", desc)
			if opts.afterStep != nil {
				if err := opts.afterStep(0, desc); err != nil {
					return fail(0, desc, err)
				}
			}
		}
		if live, err = h.readState(ctx); err != nil {
			return fail(len(res.Steps), "read the network state", err)
		}
		steps = Plan(cfg, live, prev)
	}
	base := len(res.Steps)
	for i, st := range steps {
		i += base
		if err := ctx.Err(); err != nil {
			return fail(i, st.Desc, err)
		}
		start := time.Now()
		if err := st.do(h); err != nil {
			return fail(i, st.Desc, err)
		}
		r.Add(func() error {
			if err := st.undo(h); err != nil {
				return fmt.Errorf("undo %q: %w", st.Desc, err)
			}
			return nil
		})
		res.Steps = append(res.Steps, st.Desc)
		log.Info("network step", "step", st.Desc, "took", time.Since(start))
		if opts.afterStep != nil {
			if err := opts.afterStep(i, st.Desc); err != nil {
				return fail(i, st.Desc, err)
			}
		}
	}
	next := len(res.Steps)
	res.Steps = append(res.Steps, natSteps(added, removed)...)
	// NAT networks are ensured on every apply: that also restarts a dnsmasq
	// that died (virtcon has no daemon to supervise it).
	nopts := NATOptions{DNSServers: natDNS(cfg)}
	for _, n := range cfg.Networks {
		if n.Type != NetworkNAT {
			continue
		}
		if err := EnsureNATWith(ctx, log, layout, n, nopts); err != nil {
			return fail(next, "nat network "+n.Name, err)
		}
		if !prevHas(prev, n.Name) {
			nn := n
			r.Add(func() error { return RemoveNAT(context.WithoutCancel(ctx), log, layout, nn.Name, nn.Bridge) })
		}
	}
	for _, n := range removed {
		if err := RemoveNAT(ctx, log, layout, n.Name, n.Bridge); err != nil {
			return fail(next, "remove nat network "+n.Name, err)
		}
	}
	// The management DHCP client is ensured on every apply too: a client
	// that died is started again.
	if wantDHCP != "" {
		started, err := ensureDHCPClient(ctx, log, layout, wantDHCP)
		if err != nil {
			return fail(next, "start DHCP client on "+wantDHCP, err)
		}
		if started {
			res.Steps = append(res.Steps, "start DHCP client on "+wantDHCP)
			r.Add(func() error { _, err := stopDHCPClient(layout, wantDHCP); return err })
		}
	}
	sys, err := applySystem(layout, cfg)
	res.Steps = append(res.Steps, sys...)
	res.Changed = len(res.Steps) > 0
	if err != nil {
		return fail(next, "dns/hostname", err)
	}
	if err := record(layout, cfg); err != nil {
		return fail(next, "record "+AppliedFile(layout), err)
	}
	r.Success()
	return res, nil
}

// record writes cfg to AppliedFile (0600), unless it already holds it:
// a no-op apply does not touch the disk.
func record(layout paths.Layout, cfg *Config) error {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	data = append([]byte("# Written by virtcon: the last applied network configuration. Do not edit.\n"), data...)
	path := AppliedFile(layout)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return atomicfile.Write(path, data, 0o600)
}

// natChanges lists the nat networks cfg adds to and removes from prev.
func natChanges(cfg, prev *Config) (added, removed []Network) {
	had := map[string]Network{}
	if prev != nil {
		for _, n := range prev.Networks {
			if n.Type == NetworkNAT {
				had[n.Name] = n
			}
		}
	}
	for _, n := range cfg.Networks {
		if n.Type != NetworkNAT {
			continue
		}
		if old, ok := had[n.Name]; !ok || old != n {
			added = append(added, n)
		}
		delete(had, n.Name)
	}
	for _, n := range had {
		removed = append(removed, n)
	}
	sort.Slice(removed, func(i, j int) bool { return removed[i].Name < removed[j].Name })
	return added, removed
}

// natSteps describes the nat networks an apply creates and removes.
func natSteps(added, removed []Network) []string {
	var out []string
	for _, n := range added {
		out = append(out, fmt.Sprintf("create nat network %s (bridge %s, %s, DHCP by dnsmasq)", n.Name, n.Bridge, n.Subnet))
	}
	for _, n := range removed {
		out = append(out, fmt.Sprintf("remove nat network %s (bridge %s)", n.Name, n.Bridge))
	}
	return out
}

// prevHas reports whether the previous configuration had a network name.
func prevHas(prev *Config, name string) bool {
	if prev == nil {
		return false
	}
	for _, n := range prev.Networks {
		if n.Name == name {
			return true
		}
	}
	return false
}

// natDNS is network.yaml's DNS servers, handed to NAT guests by DHCP
// instead of the bridge's own DNS forwarder; nil when it names none.
func natDNS(cfg *Config) []netip.Addr {
	var out []netip.Addr
	for _, s := range cfg.DNS.Servers {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}
