package netcfg

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func descs(steps []Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.Desc
	}
	return out
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

// appliedLive is testLive as it is after testConfig was applied.
func appliedLive() *State {
	st := testLive()
	st.Links[2].Master = "br0" // eth1
	st.Links = append(st.Links,
		Link{Name: "br0", Type: "bridge", Index: 6, MTU: 1500, Up: true, Addresses: pfx("10.0.0.1/24")},
		Link{Name: "eth2.10", Type: "vlan", Index: 7, MTU: 9000, Up: true, VLANID: 10, Parent: "eth2", Addresses: pfx("10.1.0.1/24")},
	)
	return st
}

func TestPlanFresh(t *testing.T) {
	got := descs(Plan(testConfig(), testLive(), nil))
	want := []string{
		"create bridge br0 (stp off, vlan filtering off)",
		"create VLAN eth2.10 on eth2 (id 10)",
		"enslave eth1 to bridge br0",
		"add address 10.0.0.1/24 to br0",
		"add address 10.1.0.1/24 to eth2.10",
		"bring br0 up",
		"bring eth2.10 up",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Plan:\n got %q\nwant %q", got, want)
	}
}

func TestPlanNoOpWhenEqual(t *testing.T) {
	if got := descs(Plan(testConfig(), appliedLive(), testConfig())); len(got) != 0 {
		t.Errorf("Plan(applied) = %q; want no steps", got)
	}
	// Without the record of what was applied, nothing differs either.
	if got := descs(Plan(testConfig(), appliedLive(), nil)); len(got) != 0 {
		t.Errorf("Plan(applied, no prev) = %q; want no steps", got)
	}
}

func TestPlanEnslaveMovesAddressesAndRoutes(t *testing.T) {
	live := testLive()
	live.Routes = append(live.Routes,
		Route{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("192.0.2.5"), Link: "eth0", Protocol: 4},
		Route{Dst: netip.MustParsePrefix("2001:db8::/64"), Link: "eth0", Protocol: 9}, // from an RA: stays
	)
	cfg := &Config{
		APIVersion: APIVersion, Kind: Kind,
		Management: &Management{Interface: "br0", Gateway: "192.0.2.1"},
		Bridges:    []Bridge{{Name: "br0", Ports: []string{"eth0"}}},
	}
	if err := Validate(cfg, live, ValidateOptions{}); err == nil {
		t.Error("Validate without AllowDefaultRouteChange = nil; want the default-route refusal")
	}
	if err := Validate(cfg, live, ValidateOptions{AllowDefaultRouteChange: true}); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	steps := Plan(cfg, live, nil)
	got := descs(steps)
	want := []string{
		"create bridge br0 (stp off, vlan filtering off)",
		"enslave eth0 to bridge br0, moving 192.0.2.10/24, route default via 192.0.2.1 dev eth0, route 198.51.100.0/24 via 192.0.2.5 dev eth0 to br0",
	}
	// The move brings br0 up and carries the default route: no separate
	// address, up or default route step.
	if !slices.Equal(got, want) {
		t.Errorf("Plan:\n got %q\nwant %q", got, want)
	}
}

func TestPlanDeletesOnlyPrevLinks(t *testing.T) {
	live := appliedLive()
	live.Links = append(live.Links,
		Link{Name: "old0", Type: "bridge", Index: 8, MTU: 1500, Up: true},
		Link{Name: "old0.5", Type: "vlan", Index: 9, MTU: 1500, Up: true, VLANID: 5, Parent: "old0"},
		Link{Name: "theirs0", Type: "bridge", Index: 10, MTU: 1500, Up: true},
		Link{Name: "eth1.9", Type: "vlan", Index: 11, MTU: 1500, VLANID: 9, Parent: "eth1"},
	)
	prev := testConfig()
	prev.Bridges = append(prev.Bridges, Bridge{Name: "old0"}, Bridge{Name: "gone0"})
	prev.VLANs = append(prev.VLANs, VLAN{Name: "old0.5", Link: "old0", ID: 5})
	cfg := testConfig()
	got := descs(Plan(cfg, live, prev))
	want := []string{
		"delete VLAN old0.5 (applied before, gone from this file)",
		"delete bridge old0 (applied before, gone from this file)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Plan:\n got %q\nwant %q", got, want)
	}
}

func TestPlanAddressesAndPorts(t *testing.T) {
	live := appliedLive()
	live.Links[2].Master = "br0" // eth1
	live.Links[3].Master = "br0" // eth2, enslaved by prev
	br := live.Link("br0")
	br.Addresses = pfx("10.0.0.1/24", "10.0.0.99/24") // .99: not virtcon's
	prev := testConfig()
	prev.Bridges[0].Ports = []string{"eth1", "eth2"}
	prev.VLANs = nil
	cfg := testConfig()
	cfg.VLANs = nil
	cfg.Bridges[0].Addresses = []string{"10.0.0.2/24"}
	cfg.Bridges[0].MTU = 9000
	cfg.Bridges[0].STP = true
	got := descs(Plan(cfg, live, prev))
	want := []string{
		"release eth2 from bridge br0",
		"remove address 10.0.0.1/24 from br0",
		"turn STP on on bridge br0",
		"set MTU of br0 to 9000 (was 1500)",
		"add address 10.0.0.2/24 to br0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Plan:\n got %q\nwant %q", got, want)
	}
}

func TestPlanRecreatesChangedVLAN(t *testing.T) {
	live := appliedLive()
	cfg := testConfig()
	cfg.VLANs[0].ID = 11
	got := descs(Plan(cfg, live, testConfig()))
	want := []string{
		"recreate VLAN eth2.10 on eth2 (id 11) (was on eth2, id 10)",
		"add address 10.1.0.1/24 to eth2.10",
		"bring eth2.10 up",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Plan:\n got %q\nwant %q", got, want)
	}
}

func TestPlanGateway(t *testing.T) {
	live := appliedLive()
	cfg := testConfig()
	cfg.Management.Gateway = "192.0.2.254"
	steps := Plan(cfg, live, testConfig())
	if got, want := descs(steps), []string{"set default route via 192.0.2.254 dev eth0 (replacing default via 192.0.2.1 dev eth0)"}; !slices.Equal(got, want) {
		t.Fatalf("Plan:\n got %q\nwant %q", got, want)
	}
	if steps[0].risk == nil || steps[0].risk.Field != "management.gateway" {
		t.Errorf("replacing the default route: risk %v; want one on management.gateway", steps[0].risk)
	}

	// With no default route yet, setting one is no risk.
	noDefault := appliedLive()
	noDefault.Routes = noDefault.Routes[1:]
	steps = Plan(cfg, noDefault, testConfig())
	if len(steps) != 1 || steps[0].risk != nil {
		t.Errorf("Plan = %q (risk %v); want one default route step, no risk", descs(steps), steps[0].risk)
	}

	// Dropping the gateway removes the route prev set: a risky step.
	cfg.Management.Gateway = ""
	steps = Plan(cfg, live, testConfig())
	if len(steps) != 1 || !strings.HasPrefix(steps[0].Desc, "remove default route via 192.0.2.1 dev eth0") || steps[0].risk == nil {
		t.Errorf("Plan = %q (risk %v); want one risky default route removal", descs(steps), steps[0].risk)
	}
}

func TestPlanFlagsDeletingTheDefaultRoute(t *testing.T) {
	live := testLive()
	live.Links[1].Master = "br0"
	live.Links[1].Addresses = nil
	live.Links = append(live.Links, Link{Name: "br0", Type: "bridge", Index: 6, MTU: 1500, Up: true, Addresses: pfx("192.0.2.10/24")})
	live.Routes[0].Link = "br0"
	prev := &Config{APIVersion: APIVersion, Kind: Kind, Bridges: []Bridge{{Name: "br0", Ports: []string{"eth0"}}}}
	cfg := &Config{APIVersion: APIVersion, Kind: Kind}
	steps := Plan(cfg, live, prev)
	if len(steps) != 1 || steps[0].risk == nil {
		t.Fatalf("Plan = %q; want one risky step", descs(steps))
	}
	if !errors.Is(steps[0].risk, ErrInvalid) || !strings.Contains(steps[0].risk.Error(), "default route") {
		t.Errorf("risk = %v; want a default-route FieldError", steps[0].risk)
	}
}

func TestPlanManagementVLAN(t *testing.T) {
	cfg := &Config{
		APIVersion: APIVersion, Kind: Kind,
		Management: &Management{Interface: "eth2", VLAN: 30, MTU: 1400, Addresses: []string{"203.0.113.5/24"}, Gateway: "203.0.113.1"},
	}
	live := testLive()
	live.Routes = nil
	got := descs(Plan(cfg, live, nil))
	want := []string{
		"create VLAN eth2.30 on eth2 (id 30, mtu 1400)",
		"add address 203.0.113.5/24 to eth2.30",
		"bring eth2.30 up",
		"set default route via 203.0.113.1 dev eth2.30",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Plan:\n got %q\nwant %q", got, want)
	}
}

func TestLinks(t *testing.T) {
	c := testConfig()
	c.Management.VLAN = 30
	got := c.Links()
	want := []string{"br0", "eth0", "eth0.30", "eth1", "eth2", "eth2.10"}
	if !slices.Equal(got, want) {
		t.Errorf("Links() = %q; want %q", got, want)
	}
}

func TestStepUndoesItsOwnPartOnFailure(t *testing.T) {
	var log []string
	rec := func(s string, err error) func(*handle) error {
		return func(*handle) error { log = append(log, s); return err }
	}
	boom := errors.New("boom")
	st := newStep("three ops",
		op{do: rec("do1", nil), undo: rec("undo1", nil)},
		op{do: rec("do2", nil), undo: rec("undo2", nil)},
		op{do: rec("do3", boom), undo: rec("undo3", nil)},
	)
	if err := st.do(nil); !errors.Is(err, boom) {
		t.Fatalf("do = %v; want boom", err)
	}
	if want := []string{"do1", "do2", "do3", "undo2", "undo1"}; !slices.Equal(log, want) {
		t.Errorf("calls %q; want %q", log, want)
	}
	log = nil
	st = newStep("ok", op{do: rec("do1", nil), undo: rec("undo1", nil)}, op{do: rec("do2", nil), undo: rec("undo2", nil)})
	if err := st.do(nil); err != nil {
		t.Fatal(err)
	}
	if err := st.undo(nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"do1", "do2", "undo2", "undo1"}; !slices.Equal(log, want) {
		t.Errorf("calls %q; want %q", log, want)
	}
}
