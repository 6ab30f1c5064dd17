package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// Options configure a Manager.
type Options struct {
	Layout paths.Layout
	Logger *slog.Logger
	// HostRoot is where /proc, /sys, /dev and OVMF are read ("/" live).
	HostRoot string
	// QEMU and QEMUImg override the binaries (default: found on PATH).
	QEMU, QEMUImg string
	// Accel is the acceleration verdict for accel: auto (host.New passes
	// the host's Assessor); nil asks hostinfo directly.
	Accel func(ctx context.Context) (accel, reason string)
	// Limits overrides the host capacity used by validation (tests).
	Limits *Limits
	// Scopes puts each started QEMU in its own cgroup scope; nil: none
	// (no systemd), VMs stay in the cgroup of whatever started them.
	Scopes Scopes
	// Net provides TAP devices and network lookups for VM NICs; nil means
	// the host's own (package netcfg).
	Net HostNet
	// QMPTimeout bounds one QMP exchange that QEMU answers at once (a
	// query, a pause); zero is 3 s. Commands QEMU answers only when their
	// work is done are bounded by their operation's deadline instead
	// (execLong). Tests make it short to play a slow QEMU in milliseconds.
	QMPTimeout time.Duration
}

// HostNet is what the VM runtime needs from host networking.
type HostNet interface {
	// TAPName is the stable TAP device name of a VM's NIC.
	TAPName(uid string, index int) string
	// CreateTAP makes a persistent TAP attached to bridge (mtu 0: the bridge's).
	CreateTAP(ctx context.Context, name, bridge string, mtu int) error
	// DeleteTAP removes a TAP; a missing one is not an error.
	DeleteTAP(ctx context.Context, name string) error
	// BridgeFor resolves a VM network (network.yaml) to its bridge.
	BridgeFor(network string) (string, error)
	// ListTAPs lists virtcon's TAP devices, for gc.
	ListTAPs(ctx context.Context) ([]string, error)
	// Addresses finds a NIC's addresses by its MAC: DHCP leases of our NAT
	// networks first, then the neighbour table. Source says which.
	Addresses(ctx context.Context, mac string) (addrs []string, source string, err error)
}

// Manager runs the VM operations. It holds no state between calls beyond
// its configuration: everything lives in files and processes.
type Manager struct {
	opts  Options
	log   *slog.Logger
	store store
	proc  procFS
}

// NewManager returns a Manager for the given layout.
func NewManager(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.Net == nil {
		opts.Net = defaultHostNet(opts.Layout)
	}
	return &Manager{opts: opts, log: opts.Logger, store: store{layout: opts.Layout, held: &heldLocks{}}, proc: procFS{root: filepath.Join(opts.HostRoot, "proc")}}
}

func (m *Manager) layout() paths.Layout { return m.opts.Layout }

// qmpBound is the bound of one QMP exchange QEMU answers at once.
func (m *Manager) qmpBound() time.Duration {
	if m.opts.QMPTimeout > 0 {
		return m.opts.QMPTimeout
	}
	return qmpTimeout
}

func (m *Manager) qemuBinary() (string, error) {
	if m.opts.QEMU != "" {
		return m.opts.QEMU, nil
	}
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", fmt.Errorf("qemu-system-x86_64 not found (apt-get install qemu-system-x86): %w", err)
	}
	return p, nil
}

func (m *Manager) qemuImg() (string, error) {
	if m.opts.QEMUImg != "" {
		return m.opts.QEMUImg, nil
	}
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		return "", fmt.Errorf("qemu-img not found (apt-get install qemu-utils): %w", err)
	}
	return p, nil
}

// limits returns the host capacity for validation.
func (m *Manager) limits(ctx context.Context) Limits {
	if m.opts.Limits != nil {
		return *m.opts.Limits
	}
	lim := Limits{FileExists: regularFile, ISO: checkISO}
	lim.CPUs, lim.MemoryMiB = hostinfo.Capacity(m.opts.HostRoot)
	return lim
}

func regularFile(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("no such file")
		}
		return err
	}
	if !st.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	return nil
}

// chooseAccel resolves auto to the host's verdict.
func (m *Manager) chooseAccel(ctx context.Context, want string) (string, string) {
	switch want {
	case "kvm":
		return "kvm", "requested by spec.accel"
	case "tcg":
		return "tcg", "requested by spec.accel"
	}
	if m.opts.Accel != nil {
		return m.opts.Accel(ctx)
	}
	return hostinfo.Acceleration(ctx, hostinfo.Options{Root: m.opts.HostRoot, Logger: m.log}, m.layout().AccelCacheFile(), nil)
}

// Run-time file names inside <run>/vms/<uid>/.
const (
	pidFileName   = "qemu.pid"
	qmpSockName   = "qmp.sock"
	evtSockName   = "qmp-events.sock"
	serialName    = "serial.sock"
	agentSockName = "qga.sock"
	vncSockName   = "vnc.sock"
	// the console's lock and its holder record (who is attached)
	consoleLockName   = "console.lock"
	consoleHolderName = "console.json"
	// serialChardev is the id of the serial console's chardev (qemu.go)
	serialChardev = "serial0"
)

func (m *Manager) runPath(uid, name string) string {
	return filepath.Join(m.layout().VMRunDir(uid), name)
}

// SerialLogDir holds one directory per VM (named by its UID) with its
// serial console log.
func (m *Manager) SerialLogDir() string { return filepath.Join(m.layout().LogDir(), "vms") }

// SerialLogPath is the VM's serial console log.
func (m *Manager) SerialLogPath(uid string) string {
	return filepath.Join(m.SerialLogDir(), uid, "serial.log")
}

// livePID returns the PID of the VM's QEMU if it is alive and ours. The
// pidfile is the fast path; when it is missing or stale, /proc is searched
// for a QEMU carrying the UUID, and a found PID is written back.
func (m *Manager) livePID(uid string) int {
	pidfile := m.runPath(uid, pidFileName)
	if pid, err := readPIDFile(pidfile); err == nil && m.proc.owns(pid, uid) {
		return pid
	}
	for _, p := range m.proc.scanQEMU() {
		if v, ok := argValue(p.Argv, "-uuid"); ok && strings.EqualFold(v, uid) {
			m.repairPIDFile(uid, pidfile, p.PID)
			return p.PID
		}
	}
	return 0
}

// repairPIDFile writes pid into the VM's pidfile, unless the VM's lock is
// held: a start under way has a QEMU that is daemonizing (the process
// found may be its parent, about to exit) and reads the pidfile QEMU
// writes, which a repair would overwrite with the parent's PID (a reader
// such as the agent's inventory, peeking at the run dir appearing, made
// every start of a host with an agent fail).
func (m *Manager) repairPIDFile(uid, pidfile string, pid int) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one try, no wait
	l, err := m.store.lockVM(ctx, uid)
	if err != nil {
		m.log.Debug("pidfile not repaired: the vm is locked", "vm", uid, "err", err)
		return
	}
	defer l.Release()
	if err := atomicfile.Write(pidfile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		m.log.Debug("pidfile not repaired", "vm", uid, "err", err)
	}
}

// find resolves a name or UID to a manifest.
func (m *Manager) find(ref string) (*VirtualMachine, error) {
	if strings.TrimSpace(ref) == "" {
		return nil, invalid(fieldErr("name", ref, "a VM name or UID is required"))
	}
	vm, err := m.store.find(ref)
	if errors.Is(err, ErrNotFound) {
		if e, ok := m.foreign(ref); ok {
			return nil, &NotOursError{Entry: *e}
		}
	}
	return vm, err
}
