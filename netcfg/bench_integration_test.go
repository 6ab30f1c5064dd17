//go:build integration

package netcfg

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// Targets from the issue: a 5-bridge, 10-VLAN apply into a fresh
// namespace, and a no-op re-apply.
const (
	benchFreshTarget = 200 * time.Millisecond
	benchNoopTarget  = 50 * time.Millisecond
)

// benchSetup makes, in the current namespace, the parents the bench config
// needs, and returns that config: 5 bridges (one with STP), each with an
// address and two VLAN ports, the 10 VLANs on 5 veth parents. Where the
// kernel has no 802.1Q support the ports are 10 veths instead, and
// withVLANs is false.
func benchSetup(t testing.TB) (cfg *Config, withVLANs bool) {
	t.Helper()
	withVLANs = benchVLANSupport(t)
	cfg = &Config{APIVersion: APIVersion, Kind: Kind}
	for b := range 5 {
		br := Bridge{Name: fmt.Sprintf("br%d", b), STP: b == 0, Addresses: []string{fmt.Sprintf("10.%d.0.1/24", b)}}
		if withVLANs {
			parent := fmt.Sprintf("vp%d", b)
			applyITVeth(t, parent, parent+"x", netns.None())
			for j := range 2 {
				id := 100 + 2*b + j
				v := VLAN{Name: fmt.Sprintf("%s.%d", parent, id), Link: parent, ID: id}
				cfg.VLANs = append(cfg.VLANs, v)
				br.Ports = append(br.Ports, v.Name)
			}
		} else {
			for j := range 2 {
				port := fmt.Sprintf("pt%d", 2*b+j)
				applyITVeth(t, port, port+"x", netns.None())
				br.Ports = append(br.Ports, port)
			}
		}
		cfg.Bridges = append(cfg.Bridges, br)
	}
	return cfg, withVLANs
}

func benchVLANSupport(t testing.TB) bool {
	t.Helper()
	applyITVeth(t, "probe0", "probe0x", netns.None())
	p, err := netlink.LinkByName("probe0")
	applyITMust(t, err)
	defer func() { _ = netlink.LinkDel(p) }()
	if err := netlink.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe0.5", ParentIndex: p.Attrs().Index}, VlanId: 5}); err != nil {
		return false
	}
	return true
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestApplyBenchIntegration measures the speed targets and logs
// the figures. It fails only at three times a target, so a loaded CI
// machine does not make it flaky.
func TestApplyBenchIntegration(t *testing.T) {
	testutil.RequireRoot(t, "creates network namespaces, bridges and veth pairs")
	const runs = 10
	var fresh, noop []time.Duration
	var withVLANs bool
	var steps int
	for range runs {
		leave := applyITEnter(t)
		cfg, vl := benchSetup(t)
		withVLANs = vl
		layout := paths.New(t.TempDir())
		start := time.Now()
		res, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{})
		fresh = append(fresh, time.Since(start))
		if err != nil {
			leave()
			t.Fatalf("fresh apply: %v", err)
		}
		steps = len(res.Steps)
		start = time.Now()
		res, err = Apply(context.Background(), nil, layout, cfg, ApplyOptions{})
		noop = append(noop, time.Since(start))
		leave()
		if err != nil {
			t.Fatalf("re-apply: %v", err)
		}
		if len(res.Steps) != 0 {
			t.Fatalf("re-apply ran %q; want no steps", res.Steps)
		}
	}
	what := "5 bridges, 10 VLANs on 5 veth parents"
	if !withVLANs {
		what = "5 bridges, 10 veth ports (this kernel has no 802.1Q support: no VLANs)"
	}
	mf, mn := median(fresh), median(noop)
	t.Logf("config: %s; %d steps", what, steps)
	t.Logf("fresh apply: median %v over %d runs (target %v): %v", mf, runs, benchFreshTarget, fresh)
	t.Logf("no-op re-apply: median %v over %d runs (target %v): %v", mn, runs, benchNoopTarget, noop)
	if mf > 3*benchFreshTarget {
		t.Errorf("fresh apply median %v is over 3x the %v target", mf, benchFreshTarget)
	}
	if mn > 3*benchNoopTarget {
		t.Errorf("no-op re-apply median %v is over 3x the %v target", mn, benchNoopTarget)
	}
}

// BenchmarkApply is a fresh apply of the bench config into a new namespace
// (making the namespace and parents is not timed).
func BenchmarkApply(b *testing.B) {
	testutil.RequireRoot(b, "creates network namespaces, bridges and veth pairs")
	for range b.N {
		b.StopTimer()
		leave := applyITEnter(b)
		cfg, _ := benchSetup(b)
		layout := paths.New(b.TempDir())
		b.StartTimer()
		_, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{})
		b.StopTimer()
		leave()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyNoop re-applies the bench config that is already applied.
func BenchmarkApplyNoop(b *testing.B) {
	testutil.RequireRoot(b, "creates network namespaces, bridges and veth pairs")
	leave := applyITEnter(b)
	defer leave()
	cfg, _ := benchSetup(b)
	layout := paths.New(b.TempDir())
	if _, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Apply(context.Background(), nil, layout, cfg, ApplyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
