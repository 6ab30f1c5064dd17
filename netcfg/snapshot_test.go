package netcfg

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func snapTestSnapshot() *Snapshot {
	return &Snapshot{
		Taken: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Links: []LinkSnapshot{
			{Name: "eth0", Exists: true, Kind: "device", MAC: "52:54:00:12:34:56", MTU: 1500, Up: true, Master: "br0"},
			{Name: "br0", Exists: true, Kind: "bridge", MAC: "52:54:00:aa:bb:cc", MTU: 1500, Up: true,
				Bridge:    &BridgeSnapshot{STP: true, ForwardDelayMS: 2000},
				Addresses: []AddrSnapshot{{CIDR: "192.0.2.10/24"}, {CIDR: "2001:db8::10/64", Flags: unix.IFA_F_NODAD}}},
			{Name: "br0.100", Exists: true, Kind: "vlan", MTU: 1500, VLAN: &VLANSnapshot{Parent: "br0", ID: 100},
				Addresses: []AddrSnapshot{{CIDR: "198.51.100.5/24", ValidLft: 3600, PreferredLft: 1800}}},
			{Name: "br1"},
		},
		Routes: []RouteSnapshot{
			{Link: "br0", Family: "ipv4", Dst: "default", Gateway: "192.0.2.1", Protocol: unix.RTPROT_BOOT},
			{Link: "br0", Family: "ipv6", Dst: "default", Gateway: "2001:db8::1", Metric: 1024, Protocol: unix.RTPROT_BOOT},
			{Link: "br0.100", Family: "ipv4", Dst: "203.0.113.0/24", Gateway: "198.51.100.1", Src: "198.51.100.5", Metric: 10, Scope: 0},
		},
	}
}

func TestSnapshotJSONRoundTrip(t *testing.T) {
	want := snapTestSnapshot()
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got Snapshot
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("round trip:\ngot  %+v\nwant %+v", got, *want)
	}
	for _, field := range []string{`"exists":true`, `"kind":"vlan"`, `"master":"br0"`, `"parent":"br0"`, `"dst":"default"`, `"forwardDelayMs":2000`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("JSON lacks %s: %s", field, b)
		}
	}
	// A link that did not exist carries its name only.
	if !strings.Contains(string(b), `{"name":"br1","exists":false}`) {
		t.Errorf("missing link not minimal: %s", b)
	}
}

func TestRouteSnapshotRoute(t *testing.T) {
	tests := []struct {
		in      RouteSnapshot
		wantDst string
		wantGw  string
		wantErr bool
	}{
		{in: RouteSnapshot{Family: "ipv4", Dst: "default", Gateway: "192.0.2.1"}, wantDst: "0.0.0.0/0", wantGw: "192.0.2.1"},
		{in: RouteSnapshot{Family: "ipv6", Dst: "default", Gateway: "2001:db8::1"}, wantDst: "::/0", wantGw: "2001:db8::1"},
		{in: RouteSnapshot{Family: "ipv4", Dst: "203.0.113.0/24"}, wantDst: "203.0.113.0/24"},
		{in: RouteSnapshot{Family: "ipv4", Dst: "nonsense"}, wantErr: true},
		{in: RouteSnapshot{Family: "ipv4", Dst: "default", Gateway: "x"}, wantErr: true},
	}
	for _, tt := range tests {
		r, err := tt.in.route(7)
		if (err != nil) != tt.wantErr {
			t.Errorf("%v: err %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		gw := ""
		if r.Gw != nil {
			gw = r.Gw.String()
		}
		if r.Dst.String() != tt.wantDst || gw != tt.wantGw || r.LinkIndex != 7 || r.Table != unix.RT_TABLE_MAIN {
			t.Errorf("%v: got dst %s gw %q link %d table %d; want %s %q 7 main", tt.in, r.Dst, gw, r.LinkIndex, r.Table, tt.wantDst, tt.wantGw)
		}
	}
}

func TestRouteSnapshotKey(t *testing.T) {
	a := RouteSnapshot{Link: "br0", Family: "ipv4", Dst: "default", Gateway: "192.0.2.1", Protocol: unix.RTPROT_BOOT}
	b := a
	b.Protocol = unix.RTPROT_STATIC // not part of the identity
	if a.key() != b.key() {
		t.Errorf("keys differ by protocol: %q, %q", a.key(), b.key())
	}
	b.Link = "eth0"
	if a.key() == b.key() {
		t.Errorf("keys equal across links: %q", a.key())
	}
}

// TakeSnapshot and Restore of a link that does not exist only read.
func TestSnapshotMissingLink(t *testing.T) {
	ctx := context.Background()
	s, err := TakeSnapshot(ctx, []string{"vctestnone0", "vctestnone0", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []LinkSnapshot{{Name: "vctestnone0"}}
	if !reflect.DeepEqual(s.Links, want) || len(s.Routes) != 0 {
		t.Errorf("got links %+v routes %+v; want %+v and no routes", s.Links, s.Routes, want)
	}
	if err := s.Restore(ctx); err != nil {
		t.Errorf("Restore of a missing link: %v", err)
	}
}
