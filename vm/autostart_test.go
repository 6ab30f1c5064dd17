package vm

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/internal/duration"
)

func TestSetAutostart(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	v := mustCreate(t, m, kernelVM("web", testKernel(t)))
	gen := v.Metadata.Generation

	if err := m.SetAutostart(ctx, "web", true, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := m.store.load(v.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Spec.Autostart || got.Spec.StartupOrder() != 3 || got.Spec.StartupDelay() != 10*time.Second {
		t.Errorf("spec after SetAutostart(on, 3, 10s) = autostart %v, order %d, delay %v", got.Spec.Autostart, got.Spec.StartupOrder(), got.Spec.StartupDelay())
	}
	if got.Metadata.Generation != gen+1 {
		t.Errorf("generation = %d; want %d (a spec change)", got.Metadata.Generation, gen+1)
	}
	es, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := es[0]; !e.Autostart || e.StartupOrder != 3 || e.StartupDelay != 10*time.Second {
		t.Errorf("listed entry = autostart %v, order %d, delay %v; want the spec's", e.Autostart, e.StartupOrder, e.StartupDelay)
	}

	// the same values again change nothing, not even the generation
	if err := m.SetAutostart(ctx, v.Metadata.UID, true, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.store.load(v.Metadata.UID); again.Metadata.Generation != gen+1 {
		t.Errorf("an unchanged SetAutostart bumped the generation to %d", again.Metadata.Generation)
	}

	// off, order and delay 0: spec.startup goes (an empty one is none)
	if err := m.SetAutostart(ctx, "web", false, 0, 0); err != nil {
		t.Fatal(err)
	}
	got, _ = m.store.load(v.Metadata.UID)
	if got.Spec.Autostart || got.Spec.Startup != nil {
		t.Errorf("spec after SetAutostart(off, 0, 0) = autostart %v, startup %+v; want false, nil", got.Spec.Autostart, got.Spec.Startup)
	}
}

func TestSetAutostartRefuses(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	v := mustCreate(t, m, kernelVM("web", testKernel(t)))
	for _, tc := range []struct {
		name  string
		order int
		delay time.Duration
		field string
	}{
		{"negative order", -1, 0, "spec.startup.order"},
		{"order too high", MaxStartupOrder + 1, 0, "spec.startup.order"},
		{"delay too long", 0, MaxStartupDelay + time.Second, "spec.startup.delay"},
		{"negative delay", 0, -time.Second, "spec.startup.delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.SetAutostart(ctx, "web", true, tc.order, tc.delay)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("SetAutostart(order %d, delay %v) = %v; want ErrInvalid naming %s", tc.order, tc.delay, err, tc.field)
			}
			got, _ := m.store.load(v.Metadata.UID)
			if got.Spec.Autostart || got.Metadata.Generation != v.Metadata.Generation {
				t.Errorf("a refused SetAutostart changed the spec: autostart %v, generation %d", got.Spec.Autostart, got.Metadata.Generation)
			}
		})
	}
	if err := m.SetAutostart(ctx, "nope", true, 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetAutostart of an unknown VM = %v; want ErrNotFound", err)
	}
}

// The wire form always carries autostart, startupOrder and startupDelay,
// with their defaults (never null), and reads back.
func TestEntryWireAutostart(t *testing.T) {
	for _, e := range []Entry{
		{Name: "a", Class: ClassManaged, Phase: PhaseStopped},
		{Name: "b", Class: ClassManaged, Phase: PhaseStopped, Autostart: true, StartupOrder: 2, StartupDelay: 90 * time.Second},
	} {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		json.Unmarshal(b, &raw)
		want := map[string]any{"autostart": e.Autostart, "startupOrder": float64(e.StartupOrder), "startupDelay": duration.Duration(e.StartupDelay).String()}
		for k, w := range want {
			if raw[k] != w {
				t.Errorf("%s: JSON %s = %#v; want %#v (in %s)", e.Name, k, raw[k], w, b)
			}
		}
		var back Entry
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Autostart != e.Autostart || back.StartupOrder != e.StartupOrder || back.StartupDelay != e.StartupDelay {
			t.Errorf("%s: read back %+v; want %+v", e.Name, back, e)
		}
		y, err := yaml.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(y), "startupDelay: "+duration.Duration(e.StartupDelay).String()) {
			t.Errorf("%s: YAML lacks startupDelay %v:\n%s", e.Name, e.StartupDelay, y)
		}
	}
}

func TestMarkStopped(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	v := mustCreate(t, m, kernelVM("web", testKernel(t)))
	if changed, err := m.MarkStopped(ctx, "web"); err != nil || changed {
		t.Errorf("MarkStopped of a stopped VM = %v, %v; want no change", changed, err)
	}
	// spec says running, no process: MISSING, until marked stopped
	v.Spec.Running = true
	if err := m.store.save(v); err != nil {
		t.Fatal(err)
	}
	if es, _ := m.List(ctx); es[0].Class != ClassMissing {
		t.Fatalf("class %s; want MISSING before MarkStopped", es[0].Class)
	}
	if changed, err := m.MarkStopped(ctx, "web"); err != nil || !changed {
		t.Fatalf("MarkStopped of a MISSING VM = %v, %v; want a change", changed, err)
	}
	if es, _ := m.List(ctx); es[0].Class != ClassManaged || es[0].Phase != PhaseStopped {
		t.Errorf("after MarkStopped: %s %s; want MANAGED Stopped", es[0].Class, es[0].Phase)
	}
}

// A VM whose QEMU runs is never marked stopped, whatever its spec says.
func TestMarkStoppedLeavesALiveVM(t *testing.T) {
	f := newHostFixture(t)
	ctx := context.Background()
	live, err := f.m.store.load(f.live.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	live.Spec.Running = true
	if err := f.m.store.save(live); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.m.MarkStopped(ctx, "live"); err != nil || changed {
		t.Errorf("MarkStopped of a live VM = %v, %v; want no change", changed, err)
	}
	if got, _ := f.m.store.load(f.live.Metadata.UID); !got.Spec.Running {
		t.Error("MarkStopped cleared spec.running of a VM whose QEMU runs")
	}
}
