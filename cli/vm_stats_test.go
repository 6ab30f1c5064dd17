package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// fakeStats is the fake VM service with stats and events.
type fakeStats struct {
	*fakeVMs
	stats     []vm.Stats
	statsRefs [][]string
	events    []vm.Event
	eventRefs []string
}

func (f *fakeStats) Stats(_ context.Context, refs []string) ([]vm.Stats, error) {
	f.statsRefs = append(f.statsRefs, refs)
	return f.stats, nil
}

func (f *fakeStats) Events(ctx context.Context, refs []string, o vm.EventsOptions, fn func(vm.Event)) error {
	f.eventRefs = refs
	if o.Ready != nil {
		o.Ready([]string{"web"})
	}
	for _, e := range f.events {
		if ctx.Err() != nil {
			return nil
		}
		fn(e)
	}
	return nil
}

func runStats(t *testing.T, f *fakeStats, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, vmSvc: f}
	code := runEnv(context.Background(), append([]string{"--root", t.TempDir()}, args...), env)
	if env.host != nil {
		t.Errorf("virt %s built the host's services", strings.Join(args, " "))
	}
	return out.String(), errOut.String(), code
}

func sampleStats() []vm.Stats {
	return []vm.Stats{
		{UID: webUID, Name: "web", Phase: vm.PhaseRunning, CPUPercent: 97.25, CPUKnown: true, RSSBytes: 300 << 20,
			Disks: []vm.DiskStats{{Name: "root", Known: true, ReadBytes: 2 << 20, ReadOps: 40, WriteBytes: 1 << 20, WriteOps: 10}, {Name: "cdrom", Known: true, ReadBytes: 1 << 20, ReadOps: 2}},
			NICs:  []vm.NICStats{{Index: 0, MAC: "52:54:00:00:00:01"}}},
		{UID: "u2", Name: "db", Phase: vm.PhaseStopped, Disks: []vm.DiskStats{}, NICs: []vm.NICStats{}},
		{UID: "u3", Name: "br", Phase: vm.PhaseRunning, RSSBytes: 1 << 30, BalloonBytes: 512 << 20,
			Disks: []vm.DiskStats{{Name: "root"}}, NICs: []vm.NICStats{{Known: true, RxBytes: 2048, RxPackets: 3, TxBytes: 1024, TxPackets: 2}}},
	}
}

func TestVMStatsTable(t *testing.T) {
	f := &fakeStats{fakeVMs: newFakeVMs(), stats: sampleStats()}
	out, errOut, code := runStats(t, f, "vm", "stats", "web", "db", "br")
	if code != 0 {
		t.Fatalf("exit %d; stderr %s", code, errOut)
	}
	if len(f.statsRefs) != 1 || strings.Join(f.statsRefs[0], ",") != "web,db,br" {
		t.Errorf("Stats refs = %v; want [web db br]", f.statsRefs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"NAME", "PHASE", "CPU", "MEMORY"},
		{"web", "Running", "97.2%", "300 MiB", "3 MiB/42 ops", "1 MiB/10 ops", "-", "-"},
		{"db", "Stopped", "-", "-", "-", "-", "-", "-"},
		{"br", "Running", "-", "1 GiB (balloon 512 MiB)", "-", "-", "2 KiB/3 pkts", "1 KiB/2 pkts"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s\nwant %d lines", out, len(want))
	}
	// unknown is "-", never a made-up 0
	if f := strings.Fields(lines[2]); len(f) != 8 || strings.Join(f[2:], " ") != "- - - - - -" {
		t.Errorf("stopped VM's row %q: want every figure -", lines[2])
	}
	if strings.Fields(lines[3])[2] != "-" {
		t.Errorf("row %q: CPU unknown shows %q; want -", lines[3], strings.Fields(lines[3])[2])
	}
	for i, w := range want {
		for _, cell := range w {
			if !strings.Contains(lines[i], cell) {
				t.Errorf("line %d %q: no %q", i, lines[i], cell)
			}
		}
	}
}

func TestVMStatsJSONUnknown(t *testing.T) {
	f := &fakeStats{fakeVMs: newFakeVMs(), stats: sampleStats()}
	out, _, code := runStats(t, f, "vm", "stats", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(got) != 3 || got[1]["cpuKnown"] != false || got[0]["cpuKnown"] != true {
		t.Errorf("cpuKnown = %v, %v; want true, false", got[0]["cpuKnown"], got[1]["cpuKnown"])
	}
	nics := got[0]["nics"].([]any)
	if nics[0].(map[string]any)["known"] != false {
		t.Errorf("user-mode NIC known = %v; want false", nics[0])
	}
	if len(f.statsRefs) != 1 || len(f.statsRefs[0]) != 0 {
		t.Errorf("Stats refs = %v; want all (none named)", f.statsRefs)
	}
}

func TestVMStatsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"interval too short", []string{"--watch", "--interval", "100ms"}, "--interval 100ms: want at least 500ms"},
		{"interval without watch", []string{"--interval", "5s"}, "--interval: only with --watch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeStats{fakeVMs: newFakeVMs(), stats: sampleStats()}
			_, errOut, code := runStats(t, f, append([]string{"vm", "stats"}, tt.args...)...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, tt.want)
			}
			if len(f.statsRefs) != 0 {
				t.Errorf("Stats called on bad input")
			}
		})
	}
}

func TestVMEvents(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 0, 0, 123456000, time.UTC)
	evs := []vm.Event{
		{UID: webUID, Name: "web", Event: "RTC_CHANGE", At: at, Data: map[string]any{"offset": 1}},
		{UID: webUID, Name: "web", Event: "RESET", At: at.Add(time.Second), Data: map[string]any{"guest": false, "reason": "host-qmp-system-reset"}},
		{UID: webUID, Name: "web", Event: "SHUTDOWN", At: at.Add(2 * time.Second), Data: map[string]any{"guest": true, "reason": "guest-shutdown"}},
	}
	tests := []struct {
		name string
		args []string
		want []string // event names printed, in order
	}{
		{"next event", []string{"web"}, []string{"RTC_CHANGE"}},
		{"next of a type", []string{"web", "--type", "shutdown"}, []string{"SHUTDOWN"}},
		{"follow", []string{"web", "--follow"}, []string{"RTC_CHANGE", "RESET", "SHUTDOWN"}},
		{"follow some types", []string{"--follow", "--type", "RESET,SHUTDOWN"}, []string{"RESET", "SHUTDOWN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeStats{fakeVMs: newFakeVMs(), events: evs}
			out, errOut, code := runStats(t, f, append([]string{"vm", "events", "-o", "json"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var e vm.Event
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				if e.At.IsZero() || e.UID != webUID {
					t.Errorf("event %+v: no time or uid", e)
				}
				got = append(got, e.Event)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("events = %v; want %v", got, tt.want)
			}
			if !strings.Contains(errOut, "following the events of web") {
				t.Errorf("stderr %q: no following line", errOut)
			}
		})
	}
}

func TestVMEventsTable(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	f := &fakeStats{fakeVMs: newFakeVMs(), events: []vm.Event{{UID: webUID, Name: "web\x1b[2J", Event: "RESET", At: at, Data: map[string]any{"reason": "host-qmp-system-reset", "guest": false}}}}
	out, _, code := runStats(t, f, "vm", "events", "web")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("table output carries a terminal control: %q", out)
	}
	if !strings.Contains(out, `RESET guest=false reason="host-qmp-system-reset"`) {
		t.Errorf("table line %q: want the event and its sorted data", out)
	}
	if f.eventRefs[0] != "web" {
		t.Errorf("Events refs = %v; want [web]", f.eventRefs)
	}
}

// Event times have a fixed width in every format: microseconds, always 6
// digits (a time.Time writes .25 or nothing at all for a whole second).
func TestVMEventsFixedWidthTimes(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	var evs []vm.Event
	for _, ns := range []int{0, 250000000, 123456000, 100} {
		evs = append(evs, vm.Event{UID: webUID, Name: "web", Event: "RESET", At: at.Add(time.Duration(ns))})
	}
	timeRE := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			f := &fakeStats{fakeVMs: newFakeVMs(), events: evs}
			out, errOut, code := runStats(t, f, "vm", "events", "web", "--follow", "-o", format)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			times := timeRE.FindAllString(out, -1)
			if len(times) != len(evs) {
				t.Fatalf("times %q in %q; want %d", times, out, len(evs))
			}
			for _, tm := range times {
				if m := timeRE.FindStringSubmatch(tm); len(m[1]) != 7 {
					t.Errorf("time %q: want 6 digits of fractional seconds (output %q)", tm, out)
				}
				if len(tm) != len(times[0]) {
					t.Errorf("times %q: want one width", times)
				}
			}
			if format == "json" {
				var e vm.Event
				if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &e); err != nil || !e.At.Equal(at) {
					t.Errorf("first line read back: %+v, %v; want at %s", e, err, at)
				}
			}
		})
	}
}
