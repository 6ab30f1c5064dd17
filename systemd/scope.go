package systemd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// The units virtcon's scopes belong to (packaging/systemd).
const (
	// Slice holds every VM's scope.
	Slice = "virtcon.slice"
	// GuestsService shuts the guests down at power-off (its ExecStop);
	// every scope is ordered Before= it, so systemd stops the scopes only
	// after that stop has finished (as libvirt orders its machine scopes
	// before virt-guest-shutdown.target).
	GuestsService = "virtcon-guests.service"
)

// Socket paths, relative to the host root.
const (
	// PrivateSocket is systemd's own D-Bus socket: root only, answered
	// by PID 1 itself, no bus daemon needed (early boot, late shutdown,
	// hosts without dbus).
	PrivateSocket = "run/systemd/private"
	// SystemBusSocket is the system message bus.
	SystemBusSocket = "run/dbus/system_bus_socket"
	// bootedDir is sd_booted(3)'s test: systemd creates it as PID 1.
	bootedDir = "run/systemd/system"
)

const (
	busName   = "org.freedesktop.systemd1"
	busPath   = dbus.ObjectPath("/org/freedesktop/systemd1")
	startUnit = "org.freedesktop.systemd1.Manager.StartTransientUnit"
	// errUnitExists is systemd's D-Bus error for a name already taken.
	errUnitExists = "org.freedesktop.systemd1.UnitExists"
)

// ScopeUnit is the transient scope of the VM with that UID.
func ScopeUnit(uid string) string { return "virtcon-vm-" + uid + ".scope" }

// Running reports whether systemd is PID 1 of the host at root ("/":
// this one): the directory systemd makes at boot, sd_booted(3)'s test.
func Running(root string) bool {
	st, err := os.Stat(filepath.Join(root, bootedDir))
	return err == nil && st.IsDir()
}

// ErrUnitExists is a scope name that systemd already has a unit for.
var ErrUnitExists = errors.New("unit already exists")

// ScopeError is a process that could not be put in its scope.
type ScopeError struct {
	Unit string
	PID  int
	Err  error
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("scope %s for pid %d: %v", e.Unit, e.PID, e.Err)
}

func (e *ScopeError) Unwrap() error { return e.Err }

// Options configure Scopes.
type Options struct {
	// HostRoot is where /run and /proc are read ("" or "/": live).
	HostRoot string
	// Address is the D-Bus address of systemd's manager. Empty: its
	// private socket when this process is root and the socket exists,
	// else the system bus.
	Address string
	// Bus says that Address is a message bus (the connection says Hello
	// and calls systemd by its bus name), not systemd itself.
	Bus bool
	// Settle bounds the wait for systemd to have moved the process
	// (default 5s).
	Settle time.Duration
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// Scopes puts processes into transient scopes under Slice.
type Scopes struct {
	opts Options
	log  *slog.Logger
}

// New returns Scopes for opts. Nothing is dialled until Place.
func New(opts Options) *Scopes {
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.Settle <= 0 {
		opts.Settle = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Scopes{opts: opts, log: opts.Logger}
}

// address is where systemd's manager answers, and whether it is a bus.
func (s *Scopes) address() (string, bool) {
	if s.opts.Address != "" {
		return s.opts.Address, s.opts.Bus
	}
	if p := filepath.Join(s.opts.HostRoot, PrivateSocket); os.Geteuid() == 0 && exists(p) {
		return "unix:path=" + p, false
	}
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" && s.opts.HostRoot == "/" {
		return a, true
	}
	return "unix:path=" + filepath.Join(s.opts.HostRoot, SystemBusSocket), true
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// property is one (sv) of StartTransientUnit's a(sv).
type property struct {
	Name  string
	Value dbus.Variant
}

// auxUnit is one (sa(sv)) of its a(sa(sv)): none are sent.
type auxUnit struct {
	Name  string
	Props []property
}

// scopeProperties are what every VM's scope is made with.
func scopeProperties(uid, name string, pid int) []property {
	return []property{
		{"Description", dbus.MakeVariant(fmt.Sprintf("virtcon VM %s (%s)", name, uid))},
		{"Slice", dbus.MakeVariant(Slice)},
		{"PIDs", dbus.MakeVariant([]uint32{uint32(pid)})},
		// gone as soon as QEMU exits, also when it failed: the next
		// start makes the same name again
		{"CollectMode", dbus.MakeVariant("inactive-or-failed")},
		// stopped after the guests' shutdown at power-off, never
		// in parallel with it (After= would deadlock a start from
		// the unit's own ExecStart: the scope's start would wait
		// for it)
		{"Before", dbus.MakeVariant([]string{GuestsService})},
	}
}

// Place puts the running process pid, the QEMU of the VM uid (name is
// for the unit's description), into the VM's own transient scope and
// returns the unit's name once the kernel shows the process in it.
// Mode "fail": a unit of that name that exists already is an error
// (ErrUnitExists), never replaced.
func (s *Scopes) Place(ctx context.Context, uid, name string, pid int) (string, error) {
	unit := ScopeUnit(uid)
	fail := func(err error) (string, error) { return unit, &ScopeError{Unit: unit, PID: pid, Err: err} }
	addr, bus := s.address()
	conn, err := dbus.Dial(addr, dbus.WithContext(ctx))
	if err != nil {
		return fail(fmt.Errorf("connect to systemd at %s: %w", addr, err))
	}
	defer conn.Close()
	if err := conn.Auth(nil); err != nil {
		return fail(fmt.Errorf("authenticate to systemd at %s: %w", addr, err))
	}
	if bus {
		if err := conn.Hello(); err != nil {
			return fail(fmt.Errorf("hello to the bus at %s: %w", addr, err))
		}
	}
	var job dbus.ObjectPath
	call := conn.Object(busName, busPath).CallWithContext(ctx, startUnit, 0, unit, "fail", scopeProperties(uid, name, pid), []auxUnit{})
	if err := call.Store(&job); err != nil {
		if dbusErrorName(err) == errUnitExists {
			return fail(fmt.Errorf("%w: %v", ErrUnitExists, err))
		}
		return fail(fmt.Errorf("StartTransientUnit: %w", err))
	}
	s.log.Debug("scope requested", "unit", unit, "pid", pid, "job", job)
	if err := s.settle(ctx, unit, pid); err != nil {
		return fail(fmt.Errorf("job %s: %w", job, err))
	}
	return unit, nil
}

func dbusErrorName(err error) string {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name
	}
	var pe *dbus.Error
	if errors.As(err, &pe) {
		return pe.Name
	}
	return ""
}

// settle waits until /proc shows pid in the scope: systemd moves it when
// the job runs, after the call has answered.
func (s *Scopes) settle(ctx context.Context, unit string, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Settle)
	defer cancel()
	file := filepath.Join(s.opts.HostRoot, "proc", strconv.Itoa(pid), "cgroup")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("pid %d gone before it reached the scope: %w", pid, err)
		}
		if inUnit(string(b), unit) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d not in the scope after %s (its cgroups: %s): %w", pid, s.opts.Settle, strings.Join(strings.Fields(string(b)), " "), ctx.Err())
		case <-tick.C:
		}
	}
}

// inUnit reports whether a /proc/PID/cgroup text has the process in
// unit's cgroup (slice/unit, in any hierarchy: v2, or v1 name=systemd).
func inUnit(cgroups, unit string) bool {
	for _, line := range strings.Split(cgroups, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasSuffix(parts[2], "/"+Slice+"/"+unit) {
			return true
		}
	}
	return false
}
