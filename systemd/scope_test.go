package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/virtcon/virtcon/internal/testutil"
)

// busConfig is a private message bus on one socket that lets anyone own
// any name and call anything: the stand-in for the system bus.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// privateBus starts a real dbus-daemon on a socket in a temp dir and
// returns its address.
func privateBus(t *testing.T) string {
	t.Helper()
	bin := testutil.RequireCommand(t, "dbus-daemon", "apt-get install dbus-daemon")
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, busConfig, sock), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog")
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatalf("dbus-daemon: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testutil.WaitForText(t, 5*time.Second, 10*time.Millisecond, func() string {
		if exists(sock) {
			return "up"
		}
		return ""
	}, "up")
	return "unix:path=" + sock
}

// fakeSystemd answers StartTransientUnit on the bus under systemd's name,
// as org.freedesktop.systemd1.Manager does: it records each call and, like
// systemd running the job, moves the process by rewriting its
// <root>/proc/PID/cgroup (unless move is off).
type fakeSystemd struct {
	root string
	move bool

	mu    sync.Mutex
	calls []startCall
	units map[string]bool
}

type startCall struct {
	Name, Mode string
	Props      map[string]dbus.Variant
	Aux        int
}

func (f *fakeSystemd) StartTransientUnit(name, mode string, props []property, aux []auxUnit) (dbus.ObjectPath, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := startCall{Name: name, Mode: mode, Props: map[string]dbus.Variant{}, Aux: len(aux)}
	for _, p := range props {
		c.Props[p.Name] = p.Value
	}
	f.calls = append(f.calls, c)
	if f.units[name] {
		return "", &dbus.Error{Name: errUnitExists, Body: []any{"Unit " + name + " was already loaded or has a fragment file."}}
	}
	f.units[name] = true
	if pids, ok := c.Props["PIDs"].Value().([]uint32); ok && f.move {
		for _, pid := range pids {
			cg := "0::/" + c.Props["Slice"].Value().(string) + "/" + name + "\n"
			os.WriteFile(filepath.Join(f.root, "proc", strconv.Itoa(int(pid)), "cgroup"), []byte(cg), 0o644)
		}
	}
	return dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", len(f.calls))), nil
}

// recorded returns the calls so far; the bus answers on its own goroutines.
func (f *fakeSystemd) recorded() []startCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]startCall(nil), f.calls...)
}

// serve puts f on the bus as org.freedesktop.systemd1.
func (f *fakeSystemd) serve(t *testing.T, addr string) {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("fake systemd: connect: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Export(f, busPath, "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(busName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake systemd: own %s: reply %v, %v", busName, reply, err)
	}
}

// procWith writes a fixture /proc/PID/cgroup under a new root.
func procWith(t *testing.T, pid int, cgroups string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "proc", strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroups), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestPlaceOverDBus(t *testing.T) {
	addr := privateBus(t)
	const uid, pid = "5f0c8a36-6b1e-4a5e-9d1c-0b6a4f1e2d3c", 4242
	root := procWith(t, pid, "0::/user.slice/user-0.slice/session-3.scope\n")
	f := &fakeSystemd{root: root, move: true, units: map[string]bool{}}
	f.serve(t, addr)

	s := New(Options{HostRoot: root, Address: addr, Bus: true, Logger: testutil.Logger(t)})
	unit, err := s.Place(context.Background(), uid, "web-01", pid)
	if err != nil {
		t.Fatalf("Place: %v", err)
	}
	if want := "virtcon-vm-" + uid + ".scope"; unit != want {
		t.Errorf("unit: got %q; want %q", unit, want)
	}
	calls := f.recorded()
	if len(calls) != 1 {
		t.Fatalf("StartTransientUnit calls: got %d; want 1", len(calls))
	}
	c := calls[0]
	if c.Name != unit || c.Mode != "fail" || c.Aux != 0 {
		t.Errorf("call: got name %q mode %q aux %d; want %q, \"fail\", 0", c.Name, c.Mode, c.Aux, unit)
	}
	// each property with its D-Bus type: systemd refuses a PIDs that is
	// not "au" or a Before that is not "as"
	want := map[string]struct {
		sig string
		val any
	}{
		"Description": {"s", "virtcon VM web-01 (" + uid + ")"},
		"Slice":       {"s", "virtcon.slice"},
		"PIDs":        {"au", []uint32{pid}},
		"CollectMode": {"s", "inactive-or-failed"},
		"Before":      {"as", []string{"virtcon-guests.service"}},
	}
	for name, w := range want {
		v, ok := c.Props[name]
		if !ok {
			t.Errorf("property %s: missing", name)
			continue
		}
		if v.Signature().String() != w.sig || !reflect.DeepEqual(v.Value(), w.val) {
			t.Errorf("property %s: got %s %v; want %s %v", name, v.Signature(), v.Value(), w.sig, w.val)
		}
	}
	if len(c.Props) != len(want) {
		t.Errorf("properties: got %v; want exactly %d", c.Props, len(want))
	}

	// the same VM again while its scope exists: refused, never replaced
	_, err = s.Place(context.Background(), uid, "web-01", pid)
	var se *ScopeError
	if !errors.Is(err, ErrUnitExists) || !errors.As(err, &se) || se.Unit != unit || se.PID != pid {
		t.Errorf("second Place: got %v; want a ScopeError for %s, pid %d, that is ErrUnitExists", err, unit, pid)
	}
}

// A job that systemd accepts but that never moves the process is not
// success: Place waits for the kernel's word, then fails.
func TestPlaceNotMoved(t *testing.T) {
	addr := privateBus(t)
	const pid = 4243
	root := procWith(t, pid, "0::/system.slice/getty@tty1.service\n")
	f := &fakeSystemd{root: root, move: false, units: map[string]bool{}}
	f.serve(t, addr)
	s := New(Options{HostRoot: root, Address: addr, Bus: true, Settle: 200 * time.Millisecond})
	_, err := s.Place(context.Background(), "u1", "db-01", pid)
	if err == nil || !strings.Contains(err.Error(), "not in the scope") || !strings.Contains(err.Error(), "getty@tty1.service") {
		t.Errorf("Place: got %v; want the process not in the scope, with the cgroup it is in", err)
	}
}

func TestPlaceNoSystemd(t *testing.T) {
	s := New(Options{HostRoot: t.TempDir(), Address: "unix:path=" + filepath.Join(t.TempDir(), "none"), Bus: true})
	_, err := s.Place(context.Background(), "u1", "db-01", 1)
	var se *ScopeError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "connect to systemd") {
		t.Errorf("Place without a bus: got %v; want a ScopeError saying it cannot connect", err)
	}
}

func TestInUnit(t *testing.T) {
	unit := ScopeUnit("u1")
	tests := []struct {
		name, cgroups string
		want          bool
	}{
		{"v2", "0::/virtcon.slice/virtcon-vm-u1.scope\n", true},
		{"hybrid, v1 name=systemd", "9:name=systemd:/virtcon.slice/virtcon-vm-u1.scope\n4:memory:/\n0::/\n", true},
		{"another slice", "0::/system.slice/virtcon-vm-u1.scope\n", false},
		{"another VM", "0::/virtcon.slice/virtcon-vm-u12.scope\n", false},
		{"root", "0::/\n", false},
	}
	for _, tt := range tests {
		if got := inUnit(tt.cgroups, unit); got != tt.want {
			t.Errorf("%s: inUnit(%q): got %v; want %v", tt.name, tt.cgroups, got, tt.want)
		}
	}
}

func TestRunning(t *testing.T) {
	root := t.TempDir()
	if Running(root) {
		t.Errorf("Running without run/systemd/system: got true")
	}
	os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755)
	if !Running(root) {
		t.Errorf("Running with run/systemd/system: got false")
	}
}
