package netcfg

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

// A DHCP reset is always a try: without a trial period it is refused as
// bad input (ErrResetNeedsTry) before anything is read or written.
func TestServiceResetDHCPNeedsTry(t *testing.T) {
	layout := paths.New(t.TempDir())
	// a broken desired file: the refusal comes before the fallback's why
	writeTestFile(t, DesiredFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n")
	s := NewService(layout, nil)
	for _, try := range []time.Duration{0, -time.Second} {
		res, p, why, err := s.ResetDHCP(context.Background(), "eth0", try)
		if !errors.Is(err, ErrResetNeedsTry) || !errors.Is(err, ErrInvalid) || res != nil || p != nil || why != "" {
			t.Errorf("ResetDHCP(try %v) = %v, %v, %q, %v; want ErrResetNeedsTry (ErrInvalid), nothing else", try, res, p, why, err)
		}
	}
	for _, f := range []string{DesiredPendingFile(layout), AppliedFile(layout), PendingPath(layout)} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want it never written", f, err)
		}
	}
}

// The reset goes on from the applied configuration when network.yaml
// does not load, and says why; the NIC must exist.
func TestServiceResetDHCPFallback(t *testing.T) {
	layout := paths.New(t.TempDir())
	writeTestFile(t, DesiredFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n")
	writeTestFile(t, AppliedFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: applied\n")
	_, _, why, err := NewService(layout, nil).ResetDHCP(context.Background(), "vcnosuchnic0", time.Minute)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "management.interface" || !errors.Is(err, ErrInvalid) {
		t.Errorf("ResetDHCP to a missing NIC = %v; want a field error on management.interface", err)
	}
	if why == "" {
		t.Errorf("ResetDHCP: no why; want the decode error and the fallback named")
	}
}

// PendingTry is nil when none is pending, and then drops a tried desired
// file left behind (its try was rolled back by the watchdog); a record
// that cannot be read is an error, and the file stays.
func TestServicePendingTry(t *testing.T) {
	ctx := context.Background()
	layout := paths.New(t.TempDir())
	s := NewService(layout, nil)
	writeTestFile(t, DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\n")
	if p, err := s.PendingTry(); p != nil || err != nil {
		t.Fatalf("PendingTry = %v, %v; want nil, nil", p, err)
	}
	if _, err := os.Stat(DesiredPendingFile(layout)); err != nil {
		t.Errorf("PendingTry removed %s: it only reads", DesiredPendingFile(layout))
	}
	if err := s.DropStalePending(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DesiredPendingFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale %s: %v; want it removed", DesiredPendingFile(layout), err)
	}

	writeTestFile(t, DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\n")
	restoreTestRecord(t, layout, nil)
	if p, err := s.PendingTry(); err != nil || p == nil || p.ID != "0123456789abcdef" {
		t.Errorf("PendingTry = %v, %v; want the try", p, err)
	}
	writeTestFile(t, PendingPath(layout), "{")
	if p, err := s.PendingTry(); err == nil || p != nil {
		t.Errorf("PendingTry of a broken record = %v, %v; want an error", p, err)
	}
	if err := s.DropStalePending(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DesiredPendingFile(layout)); err != nil {
		t.Errorf("tried file of a pending (unreadable) try: %v; want it kept", err)
	}
}

// A confirm removes the record first and renames the tried file after:
// dropping a "stale" tried file in between would lose the kept change's
// network.yaml. DropStalePending holds the try's lock; this races them.
func TestDropStalePendingDuringConfirm(t *testing.T) {
	ctx := context.Background()
	for i := range 100 {
		layout := paths.New(t.TempDir())
		s := NewService(layout, nil)
		restoreTestRecord(t, layout, func(p *Pending) { p.Deadline = time.Now().Add(time.Hour) })
		writeTestFile(t, DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\n")
		done := make(chan error, 1)
		go func() { done <- s.ConfirmDesired(ctx) }()
		for j := 0; j < 50; j++ {
			_ = s.DropStalePending(ctx)
		}
		if err := <-done; err != nil {
			t.Fatalf("run %d: ConfirmDesired = %v while a reader dropped stale files", i, err)
		}
		if _, err := os.Stat(DesiredFile(layout)); err != nil {
			t.Fatalf("run %d: the kept change has no network.yaml: %v", i, err)
		}
	}
}

// The bridge list: every bridge of the host with its ports and
// addresses; the applied configuration's bridges and nat networks'
// bridges are managed, the others not.
func TestBridgeStatuses(t *testing.T) {
	st := &State{Links: []Link{
		{Name: "eth0", Type: "device", Master: "br0", MTU: 1500, Up: true},
		{Name: "br0", Type: "bridge", MTU: 1500, Up: true, STP: true, Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}},
		{Name: "vcnat-lab", Type: "bridge", MTU: 1500},
		{Name: "docker0", Type: "bridge", MTU: 1500},
		{Name: "tap0", Type: "tun", Master: "vcnat-lab"},
	}}
	prev := &Config{Bridges: []Bridge{{Name: "br0"}}, Networks: []Network{{Name: "lab", Type: NetworkNAT, Bridge: "vcnat-lab"}}}
	want := []BridgeStatus{
		{Name: "br0", Ports: []string{"eth0"}, Addresses: []string{"192.0.2.10/24"}, MTU: 1500, Up: true, STP: true, Managed: true},
		{Name: "vcnat-lab", Ports: []string{"tap0"}, Addresses: []string{}, MTU: 1500, Managed: true},
		{Name: "docker0", Ports: []string{}, Addresses: []string{}, MTU: 1500},
	}
	if got := bridgeStatuses(st, prev); !reflect.DeepEqual(got, want) {
		t.Errorf("bridgeStatuses = %+v;\nwant %+v", got, want)
	}
	got := bridgeStatuses(st, nil)
	for _, b := range got {
		if b.Managed {
			t.Errorf("%s managed with nothing applied", b.Name)
		}
	}
	if got := bridgeStatuses(&State{}, prev); got == nil || len(got) != 0 {
		t.Errorf("bridgeStatuses of a host without bridges = %#v; want an empty list (JSON [])", got)
	}
}

// PlanDesired plans network.yaml against the live host; an absent file
// is an empty configuration, a broken one is bad input.
func TestServicePlanDesired(t *testing.T) {
	layout := paths.New(t.TempDir())
	s := NewService(layout, nil)
	if _, err := ReadState(context.Background()); err != nil {
		t.Skipf("cannot read the host's network: %v", err)
	}
	if res, err := s.PlanDesired(context.Background()); err != nil || res == nil || len(res.Steps) != 0 {
		t.Errorf("PlanDesired without network.yaml = %+v, %v; want no steps", res, err)
	}
	writeTestFile(t, DesiredFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n")
	if _, err := s.PlanDesired(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("PlanDesired of a broken network.yaml = %v; want ErrInvalid", err)
	}
	if _, err := os.Stat(AppliedFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a plan wrote %s", AppliedFile(layout))
	}
}

// The nat network edits: the default bridge name, a name taken, a
// network missing; the argument is left alone.
func TestNATNetworkEdits(t *testing.T) {
	if got, want := NATBridgeName("lab"), "vcnat-lab"; got != want {
		t.Errorf("NATBridgeName(lab) = %q; want %q", got, want)
	}
	if got, want := NATBridgeName("averylongname"), "vcnat-averylong"; got != want || len(got) != MaxLinkName {
		t.Errorf("NATBridgeName(averylongname) = %q; want %q (%d bytes)", got, want, MaxLinkName)
	}
	cfg := &Config{APIVersion: APIVersion, Kind: Kind, Networks: []Network{{Name: "lan", Type: NetworkBridged, Bridge: "br0"}}}
	before := cfg.Clone()
	got, err := AddNATNetwork(cfg, "lab", "10.77.0.0/24", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Network{Name: "lab", Type: NetworkNAT, Bridge: "vcnat-lab", Subnet: "10.77.0.0/24"}); len(got.Networks) != 2 || got.Networks[1] != want {
		t.Errorf("AddNATNetwork = %+v; want lan and %+v", got.Networks, want)
	}
	if got, _ := AddNATNetwork(cfg, "lab2", "10.77.1.0/24", "brlab"); got.Networks[1].Bridge != "brlab" {
		t.Errorf("AddNATNetwork with a bridge: %+v; want bridge brlab", got.Networks[1])
	}
	if _, err := AddNATNetwork(cfg, "lan", "10.77.0.0/24", ""); !errors.Is(err, ErrNetworkExists) {
		t.Errorf("AddNATNetwork(lan) = %v; want ErrNetworkExists", err)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("AddNATNetwork changed its argument: %+v", cfg)
	}
	del, err := DeleteNATNetwork(got, "lab")
	if err != nil || !reflect.DeepEqual(del.Networks, before.Networks) {
		t.Errorf("DeleteNATNetwork(lab) = %+v, %v; want only lan left", del, err)
	}
	if len(got.Networks) != 2 {
		t.Errorf("DeleteNATNetwork changed its argument: %+v", got.Networks)
	}
	for _, name := range []string{"lan", "nope"} {
		if _, err := DeleteNATNetwork(got, name); !errors.Is(err, ErrNoSuchNetwork) {
			t.Errorf("DeleteNATNetwork(%s) = %v; want ErrNoSuchNetwork (only nat networks go)", name, err)
		}
	}
}
