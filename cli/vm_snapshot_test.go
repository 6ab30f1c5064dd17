package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// snapFake is the VM fake with the snapshot methods; snaps is what
// ListSnapshots answers.
type snapFake struct {
	*fakeVMs
	snaps []vm.Snapshot
}

var _ snapshotService = snapFake{}

func (f snapFake) CreateSnapshot(_ context.Context, ref, name string, o vm.SnapshotOptions) (*vm.Snapshot, error) {
	if err := f.record("CreateSnapshot", ref, name, fmt.Sprintf("memory=%v", o.Memory)); err != nil {
		return nil, err
	}
	if _, err := f.lookup(ref); err != nil {
		return nil, err
	}
	return &vm.Snapshot{Name: name, CreatedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), SizeBytes: 3 << 20, Memory: o.Memory, Disks: []string{"root"}}, nil
}

func (f snapFake) ListSnapshots(_ context.Context, ref string) ([]vm.Snapshot, error) {
	if err := f.record("ListSnapshots", ref); err != nil {
		return nil, err
	}
	if _, err := f.lookup(ref); err != nil {
		return nil, err
	}
	return f.snaps, nil
}

func (f snapFake) RestoreSnapshot(_ context.Context, ref, name string, o vm.RestoreOptions) error {
	if err := f.record("RestoreSnapshot", ref, name, fmt.Sprintf("force=%v", o.Force)); err != nil {
		return err
	}
	_, err := f.lookup(ref)
	return err
}

func (f snapFake) DeleteSnapshot(_ context.Context, ref, name string) error {
	if err := f.record("DeleteSnapshot", ref, name); err != nil {
		return err
	}
	_, err := f.lookup(ref)
	return err
}

func (f snapFake) DeleteWith(_ context.Context, ref string, o vm.DeleteOptions) error {
	if err := f.record("DeleteWith", ref, fmt.Sprintf("force=%v with-snapshots=%v", o.Force, o.WithSnapshots)); err != nil {
		return err
	}
	_, err := f.lookup(ref)
	return err
}

func runSnapFake(t *testing.T, f snapFake, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, vmSvc: f}
	code := runEnv(context.Background(), append([]string{"--root", t.TempDir()}, args...), env)
	if env.host != nil {
		t.Errorf("virt %s built the host's services: it went around the snapshot service", strings.Join(args, " "))
	}
	return out.String(), errOut.String(), code
}

func TestVMSnapshot(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	snaps := []vm.Snapshot{
		{Name: "before-upgrade", CreatedAt: at, SizeBytes: 5 << 20, Disks: []string{"root", "data"}},
		{Name: "live", CreatedAt: at.Add(time.Hour), SizeBytes: 300 << 20, Memory: true, Disks: []string{"root", "data"}},
	}
	for _, tc := range []struct {
		name     string
		args     []string
		errs     map[string]error
		code     int
		out, err string // substrings of stdout and stderr
		call     string // the snapshot call, "" for none
	}{
		{name: "create", args: []string{"vm", "snapshot", "create", "web", "s1"},
			out: "web: snapshot s1 taken (disks) in", call: "CreateSnapshot(web, s1, memory=false)"},
		{name: "create memory json", args: []string{"vm", "snapshot", "create", "web", "s1", "--memory", "-o", "json"},
			out: `"memory": true`, call: "CreateSnapshot(web, s1, memory=true)"},
		{name: "create taken", args: []string{"vm", "snapshot", "create", "web", "s1"}, code: 1,
			errs: map[string]error{"CreateSnapshot": &vm.SnapshotExistsError{VM: "web", Name: "s1"}},
			err:  `snapshot "s1": already exists (virt vm snapshot delete web s1 first`, call: "CreateSnapshot(web, s1, memory=false)"},
		{name: "create on a VM not there", args: []string{"vm", "snapshot", "create", "nope", "s1"}, code: 1,
			err: `"nope"`, call: "CreateSnapshot(nope, s1, memory=false)"},
		{name: "create without a name", args: []string{"vm", "snapshot", "create", "web"}, code: 2, err: "accepts 2 arg(s)"},
		{name: "list", args: []string{"vm", "snapshot", "list", "web"},
			out: "NAME", call: "ListSnapshots(web)"},
		{name: "list json", args: []string{"vm", "snapshot", "list", "web", "-o", "json"},
			out: `"name": "live"`, call: "ListSnapshots(web)"},
		{name: "list yaml", args: []string{"vm", "snapshot", "ls", "web", "-o", "yaml"},
			out: "memory: true", call: "ListSnapshots(web)"},
		{name: "restore running", args: []string{"vm", "snapshot", "restore", "web", "live"}, code: 2,
			errs: map[string]error{"RestoreSnapshot": &vm.RestoreRunningError{VM: "web", Name: "live", PID: 42, Memory: true}},
			err:  "--force loads the snapshot", call: "RestoreSnapshot(web, live, force=false)"},
		{name: "restore running disk-only", args: []string{"vm", "snapshot", "restore", "web", "before-upgrade"}, code: 2,
			errs: map[string]error{"RestoreSnapshot": &vm.RestoreRunningError{VM: "web", Name: "before-upgrade", PID: 42}},
			err:  "--force powers it off", call: "RestoreSnapshot(web, before-upgrade, force=false)"},
		{name: "restore forced", args: []string{"vm", "snapshot", "restore", "web", "live", "--force"},
			err: "web: restored to snapshot live", call: "RestoreSnapshot(web, live, force=true)"},
		{name: "restore other layout", args: []string{"vm", "snapshot", "restore", "web", "old"}, code: 1,
			errs: map[string]error{"RestoreSnapshot": &vm.SnapshotLayoutError{VM: "web", Name: "old", Then: []string{"root"}, Now: []string{"root", "data"}, Missing: []string{"data"}}},
			err:  "taken of disks [root], the VM has [root, data]", call: "RestoreSnapshot(web, old, force=false)"},
		{name: "restore unrecorded", args: []string{"vm", "snapshot", "restore", "web", "lost"}, code: 1,
			errs: map[string]error{"RestoreSnapshot": &vm.SnapshotUnrecordedError{VM: "web", Name: "lost", State: vm.SnapshotUnrecorded, Why: "not in snapshots.json", Memory: true}},
			err:  "virt vm snapshot delete web lost removes it", call: "RestoreSnapshot(web, lost, force=false)"},
		{name: "create taken in another case", args: []string{"vm", "snapshot", "create", "web", "S1"}, code: 1,
			errs: map[string]error{"CreateSnapshot": &vm.SnapshotExistsError{VM: "web", Name: "S1", Existing: "s1"}},
			err:  `already exists as "s1" (snapshot names are unique regardless of case) (virt vm snapshot delete web s1 first`, call: "CreateSnapshot(web, S1, memory=false)"},
		{name: "bad name", args: []string{"vm", "snapshot", "create", "web", "9x"}, code: 2,
			errs: map[string]error{"CreateSnapshot": fmt.Errorf("%w: snapshot: must be a name", vm.ErrInvalidSnapshotName)},
			err:  "invalid snapshot name", call: "CreateSnapshot(web, 9x, memory=false)"},
		{name: "restore other machine", args: []string{"vm", "snapshot", "restore", "web", "live"}, code: 1,
			errs: map[string]error{"RestoreSnapshot": &vm.SnapshotShapeError{VM: "web", Name: "live", Diffs: []string{"memory 1024 MiB now (spec.memoryMiB), 512 MiB in the snapshot"}}},
			err:  "memory snapshot was taken of another machine: memory 1024 MiB now (spec.memoryMiB), 512 MiB in the snapshot: change the spec back", call: "RestoreSnapshot(web, live, force=false)"},
		{name: "delete", args: []string{"vm", "snapshot", "delete", "web", "live"},
			err: "web: snapshot live deleted", call: "DeleteSnapshot(web, live)"},
		{name: "delete missing", args: []string{"vm", "snapshot", "rm", "web", "x"}, code: 1,
			errs: map[string]error{"DeleteSnapshot": &vm.SnapshotNotFoundError{VM: "web", Name: "x"}},
			err:  "(virt vm snapshot list web)", call: "DeleteSnapshot(web, x)"},
		{name: "vm delete with snapshots", args: []string{"vm", "delete", "web"}, code: 2,
			errs: map[string]error{"Delete": &vm.HasSnapshotsError{VM: "web", Snapshots: []string{"before-upgrade", "live"}}},
			err:  "has snapshots (before-upgrade, live); virt vm delete web --with-snapshots deletes them", call: "Delete(web, false)"},
		{name: "vm delete --with-snapshots", args: []string{"vm", "delete", "web", "--with-snapshots", "--force"},
			err: "web deleted", call: "DeleteWith(web, force=true with-snapshots=true)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := snapFake{fakeVMs: newFakeVMs(), snaps: snaps}
			for k, v := range tc.errs {
				f.errs[k] = v
			}
			out, errOut, code := runSnapFake(t, f, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
				t.Errorf("virt %s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out, tc.err)
			}
			var calls []string
			for _, c := range f.calls {
				calls = append(calls, strings.ReplaceAll(strings.ReplaceAll(c.String(), `"`, ""), "(", "("))
			}
			got := strings.Join(calls, "; ")
			if tc.call == "" && got != "" || tc.call != "" && !strings.Contains(got, tc.call) {
				t.Errorf("virt %s: calls %q; want %q", strings.Join(tc.args, " "), got, tc.call)
			}
		})
	}
}

// The table says what each snapshot is: its name, date, memory state
// (its own: - for a disk-only one), whether it holds memory, its disks and
// whether it is recorded, with why below when not; json and yaml carry
// every field.
func TestVMSnapshotListOutput(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := snapFake{fakeVMs: newFakeVMs(), snaps: []vm.Snapshot{
		{Name: "before-upgrade", CreatedAt: at, Disks: []string{"root"}, State: vm.SnapshotRecorded},
		{Name: "live", CreatedAt: at.Add(time.Hour), VMStateBytes: 300 << 20, SizeBytes: 300 << 20, Memory: true, Disks: []string{"root"}, State: vm.SnapshotRecorded},
	}}
	out, _, code := runSnapFake(t, f, "vm", "snapshot", "list", "web")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "VMSTATE") || !strings.Contains(lines[0], "STATE") || strings.Contains(lines[0], "SIZE") {
		t.Fatalf("list: exit %d, %q; want a header (VMSTATE, STATE; no SIZE) and two rows", code, out)
	}
	for i, want := range [][]string{{"before-upgrade", " - ", "no"}, {"live", "300 MiB", "yes"}} {
		row := strings.Fields(lines[i+1])
		if row[0] != want[0] || !strings.Contains(lines[i+1], want[1]) || !strings.Contains(" "+strings.Join(row, " ")+" ", " "+want[2]+" ") {
			t.Errorf("row %d = %q; want %v", i, lines[i+1], want)
		}
	}
	out, _, _ = runSnapFake(t, f, "vm", "snapshot", "list", "web", "-o", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("list -o json: %v: %s", err, out)
	}
	if rows[1]["name"] != "live" || rows[1]["memory"] != true || rows[1]["sizeBytes"] != float64(300<<20) || rows[1]["createdAt"] != "2026-12-01T13:00:00Z" {
		t.Errorf("list -o json row = %v", rows[1])
	}
	if rows[1]["vmStateBytes"] != float64(300<<20) || rows[1]["state"] != "recorded" || rows[0]["vmStateBytes"] != float64(0) || rows[0]["sizeBytes"] != float64(0) {
		t.Errorf("list -o json rows = %v; want vmStateBytes 0 and 300 MiB, state recorded", rows)
	}
	// unrecorded and partial: the state in the row, why below the table
	// and in json and yaml
	f.snaps = append(f.snaps,
		vm.Snapshot{Name: "lost", CreatedAt: at.Add(2 * time.Hour), VMStateBytes: 185 << 20, Memory: true, Disks: []string{"root"}, State: vm.SnapshotUnrecorded, Why: "not in snapshots.json: made by a snapshot command that did not finish"},
		vm.Snapshot{Name: "half", CreatedAt: at.Add(3 * time.Hour), Disks: []string{"root"}, State: vm.SnapshotPartial, Why: "only on disk root, not on data"})
	out, _, _ = runSnapFake(t, f, "vm", "snapshot", "list", "web")
	for _, want := range []string{"UNRECORDED\n", "PARTIAL\n", "UNRECORDED lost: not in snapshots.json", "PARTIAL half: only on disk root, not on data; not restored (virt vm snapshot delete web half removes it)"} {
		if !strings.Contains(out, want) {
			t.Errorf("list with an unrecorded and a partial snapshot:\n%s\nwant %q", out, want)
		}
	}
	out, _, _ = runSnapFake(t, f, "vm", "snapshot", "list", "web", "-o", "json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 4 || rows[2]["state"] != "unrecorded" || !strings.Contains(fmt.Sprint(rows[2]["why"]), "did not finish") || rows[3]["state"] != "partial" {
		t.Errorf("list -o json with an unrecorded and a partial snapshot: %v: %s", err, out)
	}
	out, _, _ = runSnapFake(t, f, "vm", "snapshot", "list", "web", "-o", "yaml")
	if !strings.Contains(out, "state: unrecorded") || !strings.Contains(out, "why: 'not in snapshots.json") && !strings.Contains(out, "why: not in snapshots.json") {
		t.Errorf("list -o yaml: %s; want state and why", out)
	}
	// none: an empty list, not null
	f.snaps = nil
	if out, _, _ = runSnapFake(t, f, "vm", "snapshot", "list", "web", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("list -o json of no snapshots = %q; want []", out)
	}
}
