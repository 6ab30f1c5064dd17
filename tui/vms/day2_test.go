package vms

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/vm"
)

// day2Fake is the fake manager with snapshots and clones: each call is
// recorded with its arguments in op.
type day2Fake struct {
	*fakeManager
	snaps []vm.Snapshot
}

func (f *day2Fake) ListSnapshots(ctx context.Context, ref string) ([]vm.Snapshot, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{op: "list", ref: ref}) // not an action
	f.mu.Unlock()
	return append([]vm.Snapshot(nil), f.snaps...), nil
}
func (f *day2Fake) CreateSnapshot(ctx context.Context, ref, name string, o vm.SnapshotOptions) (*vm.Snapshot, error) {
	return &vm.Snapshot{Name: name}, f.record(ctx, call{op: fmt.Sprintf("snapshot create %s memory=%v", name, o.Memory), ref: ref})
}
func (f *day2Fake) RestoreSnapshot(ctx context.Context, ref, name string, o vm.RestoreOptions) error {
	return f.record(ctx, call{op: "snapshot restore " + name, ref: ref, force: o.Force})
}
func (f *day2Fake) DeleteSnapshot(ctx context.Context, ref, name string) error {
	return f.record(ctx, call{op: "snapshot delete " + name, ref: ref})
}
func (f *day2Fake) Clone(ctx context.Context, src, name string, o vm.CloneOptions) (*vm.VirtualMachine, error) {
	return &vm.VirtualMachine{}, f.record(ctx, call{op: fmt.Sprintf("clone %s linked=%v", name, o.Linked), ref: src})
}

func fakeSnaps() []vm.Snapshot {
	at := func(d, h int) time.Time { return time.Date(2026, 11, d, h, 30, 0, 0, time.Local) }
	return []vm.Snapshot{
		{Name: "before-upgrade", CreatedAt: at(20, 9), Disks: []string{"root"}, State: vm.SnapshotRecorded},
		{Name: "with-ram", CreatedAt: at(28, 17), VMStateBytes: 2<<30 + 300<<20, SizeBytes: 2<<30 + 300<<20, Memory: true, Disks: []string{"root"}, State: vm.SnapshotRecorded},
		{Name: "lost", CreatedAt: at(29, 8), VMStateBytes: 185 << 20, SizeBytes: 185 << 20, Memory: true, Disks: []string{"root"}, State: vm.SnapshotUnrecorded,
			Why: "not in snapshots.json: made by a snapshot command that did not finish (or outside virt), so what it was taken of cannot be checked"},
	}
}

func newDay2(t *testing.T, tier term.Tier, sess *common.Session) (*Model, *day2Fake) {
	t.Helper()
	f := &day2Fake{fakeManager: &fakeManager{entries: fakeEntries()}, snaps: fakeSnaps()}
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Session = sess
	m := New(c, f, Options{IdleTimeout: 5 * time.Minute})
	m.SetSize(areaW, areaH)
	deliver(t, m, common.ActivateMsg{})
	return m, f
}

func TestGoldenDay2(t *testing.T) {
	tests := []struct {
		name string
		keys []string
		want []string
	}{
		{"snapshots", []string{"z", "j"}, []string{"Snapshots of web-01", "before-upgrade", "> with-ram", "2.3 GiB", "yes", "VMSTATE", "STATE", "UNRECORDED"}},
		{"snapshots-unrecorded", []string{"z", "j", "j"}, []string{"> lost", "185 MiB", "UNRECORDED: not in snapshots.json", "not restored (Del deletes it)"}},
		{"snapshots-empty-menu", []string{"enter"}, []string{"Snapshots...", "Clone..."}},
		{"snapshot-form", []string{"z", "c", "p", "r", "e", "tab", "space"}, []string{"Snapshot of web-01", "Name: pre", "[x] With memory"}},
		{"snapshot-form-bad-name", []string{"z", "c", "9", "enter"}, []string{"[FAIL] must be 1-63", "starting with a letter"}},
		{"restore-running", []string{"z", "enter"}, []string{"Restore web-01 to snapshot before-upgrade?", "THE VM IS RUNNING", "powered off at once"}},
		{"restore-running-memory", []string{"z", "j", "enter"}, []string{"THE VM IS RUNNING", "memory and disks"}},
		{"restore-stopped", []string{"j", "z", "enter"}, []string{"Restore web-02 to snapshot before-upgrade?", "Its disks go back"}},
		{"restore-stopped-memory", []string{"j", "z", "j", "enter"}, []string{"Restore web-02 to snapshot with-ram?", "It then starts, and resumes"}},
		{"snapshot-delete", []string{"z", "D"}, []string{"Delete snapshot before-upgrade of web-01?", "Press y to delete before-upgrade"}},
		{"clone-form", []string{"u", "w", "e", "b", "-", "9", "tab", "space"}, []string{"Clone web-01", "Name: web-9", "[x] Linked"}},
	}
	for _, tier := range tuitest.GoldenTiers {
		for _, tt := range tests {
			t.Run(tier.String()+"/"+tt.name, func(t *testing.T) {
				m, _ := newDay2(t, tier, writer())
				keysTo(t, m, tt.keys...)
				out := m.View().Content
				tuitest.RequireGolden(t, tier, out, areaW, areaH)
				for _, w := range tt.want {
					if !strings.Contains(ansi.Strip(out), w) {
						t.Errorf("screen lacks %q:\n%s", w, ansi.Strip(out))
					}
				}
			})
		}
	}
}

func TestDay2Actions(t *testing.T) {
	tests := []struct {
		name    string
		keys    []string
		want    []call // nil: nothing done
		cli     string // CLI() before the last key
		message string
		panel   bool // the snapshots panel still open after
	}{
		{"restore asks, n cancels", []string{"z", "enter", "n"}, nil,
			"virt vm snapshot restore web-01 before-upgrade --force", "restore of snapshot \"before-upgrade\" cancelled", true},
		{"restore asks, esc cancels", []string{"z", "enter", "esc"}, nil, "virt vm snapshot restore web-01 before-upgrade --force", "cancelled", true},
		{"restore asks, enter does not confirm", []string{"z", "enter", "enter"}, nil, "virt vm snapshot restore web-01 before-upgrade --force", "cancelled", true},
		{"restore running confirmed forces", []string{"z", "enter", "y"}, []call{{op: "snapshot restore before-upgrade", ref: uid(1), force: true}},
			"virt vm snapshot restore web-01 before-upgrade --force", "web-01 restored to snapshot \"before-upgrade\"", true},
		{"restore stopped confirmed, no force", []string{"j", "z", "j", "enter", "Y"}, []call{{op: "snapshot restore with-ram", ref: uid(2)}},
			"virt vm snapshot restore web-02 with-ram", "restored", true},
		{"delete asks", []string{"z", "D", "y"}, []call{{op: "snapshot delete before-upgrade", ref: uid(1)}},
			"virt vm snapshot delete web-01 before-upgrade", "snapshot \"before-upgrade\" deleted", true},
		{"delete cancelled", []string{"z", "j", "delete", "x"}, nil, "virt vm snapshot delete web-01 with-ram", "cancelled", true},
		{"create with memory", []string{"z", "c", "p", "r", "e", "-", "1", "tab", "space", "enter"},
			[]call{{op: "snapshot create pre-1 memory=true", ref: uid(1)}}, "virt vm snapshot create web-01 pre-1 --memory", "snapshot \"pre-1\" taken (with memory)", true},
		{"create disk only, backspace edits", []string{"z", "c", "a", "b", "x", "backspace", "enter"},
			[]call{{op: "snapshot create ab memory=false", ref: uid(1)}}, "virt vm snapshot create web-01 ab", "taken", true},
		{"create: a bad name stays in the form", []string{"z", "c", "-", "enter"}, nil, "virt vm snapshot create web-01 -", "", true},
		{"create cancelled with esc", []string{"z", "c", "a", "esc"}, nil, "virt vm snapshot create web-01 a", "", true},
		{"snapshots from the menu", []string{"enter", "z", "esc"}, nil, "virt vm snapshot list web-01", "", false},
		{"full clone", []string{"u", "c", "2", "enter"}, []call{{op: "clone c2 linked=false", ref: uid(1)}},
			"virt vm clone web-01 c2", "web-01 cloned to \"c2\"", false},
		{"linked clone from the menu", []string{"j", "enter", "u", "c", "3", "down", "space", "enter"}, []call{{op: "clone c3 linked=true", ref: uid(2)}},
			"virt vm clone web-02 c3 --linked", "cloned to \"c3\"", false},
		{"clone needs a name", []string{"u", "enter"}, nil, "virt vm clone web-01 ''", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, f := newDay2(t, term.Plain, writer())
			keysTo(t, m, tt.keys[:len(tt.keys)-1]...)
			if got := m.CLI(); got != tt.cli {
				t.Errorf("CLI() before %q = %q; want %q", tt.keys[len(tt.keys)-1], got, tt.cli)
			}
			keysTo(t, m, tt.keys[len(tt.keys)-1])
			got := f.actions()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("calls = %+v; want %+v", got, tt.want)
			}
			if !strings.Contains(screen(m), tt.message) {
				t.Errorf("screen lacks %q:\n%s", tt.message, screen(m))
			}
			if (m.snaps != nil) != tt.panel {
				t.Errorf("snapshots panel open = %v; want %v", m.snaps != nil, tt.panel)
			}
		})
	}
}

// A read-only session sees the snapshots but neither takes, restores nor
// clones.
func TestDay2ReadOnly(t *testing.T) {
	ro := &common.Session{User: "root", TTY: "tty2"}
	for _, ks := range [][]string{{"z", "c"}, {"z", "enter", "y"}, {"z", "D", "y"}, {"u"}} {
		m, f := newDay2(t, term.Plain, ro)
		keysTo(t, m, ks...)
		if got := f.actions(); len(got) != 0 {
			t.Errorf("%v: calls %+v; want none", ks, got)
		}
		if m.form != nil || m.confirm != nil {
			t.Errorf("%v: a form or confirmation opened read-only", ks)
		}
		if ks[0] == "z" && !strings.Contains(screen(m), "before-upgrade") {
			t.Errorf("%v: the snapshots are not shown read-only:\n%s", ks, screen(m))
		}
	}
}

// The list's own fake has no snapshots or clones: the keys say so and do
// nothing.
func TestDay2Unavailable(t *testing.T) {
	m := loaded(t, term.Plain, &fakeManager{entries: fakeEntries()}, writer())
	keysTo(t, m, "z")
	if m.snaps != nil || !strings.Contains(screen(m), "not available") {
		t.Errorf("snapshots on a manager without them:\n%s", screen(m))
	}
	keysTo(t, m, "u")
	if m.form != nil {
		t.Error("a clone form on a manager without Clone")
	}
}
