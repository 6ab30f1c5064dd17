package host

import (
	"log/slog"
	"os"
	"path/filepath"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/diag"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/power"
	"github.com/virtcon/virtcon/systemd"
	"github.com/virtcon/virtcon/vm"
)

// Options configure the services.
type Options struct {
	// Layout is virtcon's own files (--root).
	Layout paths.Layout
	// HostRoot is where /proc, /sys and /dev are read ("" or "/": live).
	HostRoot string
	// Logger receives the services' logs; nil discards them.
	Logger *slog.Logger
}

// Host holds the services. They are cheap to build (no I/O happens until
// a call), safe for concurrent use, and hold no state between calls that
// is not in files or processes.
type Host struct {
	Layout   paths.Layout
	HostRoot string
	Log      *slog.Logger

	// VMs runs the VMs: QEMU processes driven over QMP.
	VMs *vm.Manager
	// Net is the host network: network.yaml, applied with try/confirm/rollback.
	Net *netcfg.Service
	// Info inspects the host: inventory, checks, the KVM verdict.
	Info *hostinfo.Assessor
	// Power reboots or powers off the host.
	Power *power.Service
	// Diag writes support bundles.
	Diag *diag.Service
}

// New builds the services for opts.
func New(opts Options) *Host {
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	info := hostinfo.NewAssessor(hostinfo.Options{Root: opts.HostRoot, Logger: opts.Logger}, opts.Layout.AccelCacheFile())
	h := &Host{
		Layout: opts.Layout, HostRoot: opts.HostRoot, Log: opts.Logger,
		Info:  info,
		Net:   netcfg.NewService(opts.Layout, opts.Logger),
		VMs:   vm.NewManager(vm.Options{Layout: opts.Layout, Logger: opts.Logger, HostRoot: opts.HostRoot, Accel: info.Acceleration, Scopes: scopes(opts)}),
		Power: power.NewService(opts.Logger),
	}
	h.Diag = diag.NewService(opts.Layout, opts.Logger, info)
	return h
}

// scopes are systemd's transient scopes for the VMs, where systemd is PID
// 1 of this host and we are root (only root may make system units; a
// non-root caller's VMs start as without systemd). Nil otherwise: VMs
// start as detached processes in the caller's cgroup, and `virt host
// check` says so (vm.scopes).
func scopes(opts Options) vm.Scopes {
	if filepath.Clean(opts.HostRoot) != "/" || os.Geteuid() != 0 || !systemd.Running("/") {
		return nil
	}
	return systemd.New(systemd.Options{Logger: opts.Logger})
}

// Auth returns the PAM authenticator of a face that logs users in (the
// DCUI, the web terminal), with that face's service, group and helper.
func (h *Host) Auth(opts auth.Options) *auth.Authenticator {
	return auth.New(h.Layout, h.Log, opts)
}
