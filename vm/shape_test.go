package vm

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestShapeOf(t *testing.T) {
	t.Parallel()
	base := Launch{UID: testUID, Name: "web", CPUs: 2, MemoryMiB: 512, Machine: "q35", Accel: "tcg", Firmware: "bios",
		MAC: "52:54:00:00:00:01", Seed: "/s/seed.iso", Kernel: "/k/vmlinuz",
		Disks: []LaunchDisk{{Path: "/v/disk-root.qcow2", Format: "qcow2"}}}
	got := shapeOf(append([]string{"/usr/bin/qemu-system-x86_64"}, base.Args()...))
	want := SavedShape{Machine: "q35", Firmware: "bios", CPUs: 2, MemoryMiB: 512,
		Disks: []string{"disk-root.qcow2 (qcow2)"}, NICs: []string{"virtio-net-pci 52:54:00:00:00:01 (user)"}, DirectBoot: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("shapeOf: got %+v; want %+v", got, want)
	}
	tests := []struct {
		name    string
		edit    func(l *Launch)
		devices bool // the record has devices (format 2)
		want    []string
	}{
		{"same", func(l *Launch) {}, true, nil},
		{"accel and paths of the run differ only", func(l *Launch) { l.Accel, l.QMPSocket = "kvm", "/elsewhere" }, true, nil},
		{"memory", func(l *Launch) { l.MemoryMiB = 1024 }, true, []string{"spec.memoryMiB 1024, saved with 512"}},
		{"cpus", func(l *Launch) { l.CPUs = 4 }, true, []string{"spec.cpus 4, saved with 2"}},
		{"firmware", func(l *Launch) { l.Firmware, l.OVMFCode, l.OVMFVars = "uefi", "/o/OVMF_CODE.fd", "/v/OVMF_VARS.fd" }, true, []string{"spec.firmware uefi, saved with bios"}},
		{"a disk added", func(l *Launch) { l.Disks = append(l.Disks, LaunchDisk{Path: "/v/disk-data.qcow2", Format: "qcow2"}) }, true,
			[]string{"spec.disks [disk-root.qcow2 (qcow2), disk-data.qcow2 (qcow2)], saved with [disk-root.qcow2 (qcow2)]"}},
		{"a NIC on a bridge", func(l *Launch) { l.NICs = []LaunchNIC{{TAP: "vt0", MAC: "52:54:00:00:00:02", Model: "e1000"}} }, true,
			[]string{"spec.network [e1000 52:54:00:00:00:02 (tap)], saved with [virtio-net-pci 52:54:00:00:00:01 (user)]"}},
		{"direct boot dropped", func(l *Launch) { l.Kernel = "" }, true, []string{"direct kernel boot (spec.boot.kernel) false, saved with true"}},
		{"devices not recorded (format 1)", func(l *Launch) { l.Disks = nil }, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base
			l.Disks = append([]LaunchDisk(nil), base.Disks...)
			tt.edit(&l)
			saved := want
			if !tt.devices {
				saved.Disks, saved.NICs, saved.DirectBoot = nil, nil, false
			}
			if got := shapeDiffs(saved, shapeOf(l.Args()), tt.devices); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("diffs: got %q; want %q", got, tt.want)
			}
		})
	}
}

// A change applied to a running VM (virt apply) is not in its stream: the
// save records what the running QEMU was started with, and the resume
// refuses the spec's new machine as spec-changed, naming what changed,
// before QEMU is started (review of issue 11, item 4).
func TestSaveRecordsRunningQEMU(t *testing.T) {
	t.Parallel()
	m, _, host := newTestManager(t)
	vm := mustCreate(t, m, kernelVM("web", testKernel(t)))
	uid := vm.Metadata.UID
	launch, err := m.launchFor(vm, "tcg")
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"/usr/bin/qemu-system-x86_64"}, launch.Args()...)
	// the spec moves on while the VM runs (an unrealised change)
	vm.Spec.Running, vm.Spec.MemoryMiB, vm.Spec.CPUs = true, vm.Spec.MemoryMiB*2, 2
	vm.Metadata.Generation++
	vm.Status.ObservedGeneration = vm.Metadata.Generation - 1
	if err := m.store.save(vm); err != nil {
		t.Fatal(err)
	}
	q := startFakeQEMU(t, m, host, uid, argv)
	serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{pkg: "test", handle: func(cmd string, _ json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "query-migrate":
			return map[string]any{"status": "completed"}
		case "qom-get":
			return "pc-q35-7.2-machine"
		case "quit":
			q.exit()
			return qmpHangUp{}
		}
		return nil
	}})
	if _, err := m.Save(context.Background(), "web"); err != nil {
		t.Fatalf("Save: %v", err)
	}
	rec, err := m.SavedRecord(context.Background(), "web")
	if err != nil || rec == nil {
		t.Fatalf("SavedRecord: %v", err)
	}
	if rec.MachineType != "pc-q35-7.2" || rec.Machine != "q35" {
		t.Errorf("record: machine %s, type %s; want q35, pc-q35-7.2 (as QEMU resolved it)", rec.Machine, rec.MachineType)
	}
	if rec.MemoryMiB != launch.MemoryMiB || rec.CPUs != launch.CPUs || rec.Generation != vm.Status.ObservedGeneration || rec.Format != savedFormat {
		t.Errorf("record: memory %d, cpus %d, generation %d, format %d; want the running QEMU's %d, %d, generation %d, format %d",
			rec.MemoryMiB, rec.CPUs, rec.Generation, rec.Format, launch.MemoryMiB, launch.CPUs, vm.Status.ObservedGeneration, savedFormat)
	}

	err = m.Start(context.Background(), "web")
	var se *SavedStateError
	if !errors.As(err, &se) || se.Reason != SavedSpecChanged {
		t.Fatalf("Start: got %v; want a SavedStateError (spec-changed)", err)
	}
	for _, w := range []string{"spec.memoryMiB 1024, saved with 512", "spec.cpus 2, saved with 1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Start: %q; want it to name %q", err, w)
		}
	}
	if !m.hasSaved(uid) {
		t.Error("the refused state is gone")
	}
}

// QEMU exits when it cannot load a stream; its monitor hangs up a moment
// before the process is gone from /proc. That is the state's failure
// (corrupt, with the --discard-saved way out), not a generic QMP error.
func TestResumeQEMUExitsWhileLoading(t *testing.T) {
	t.Parallel()
	var f *resumeFixture
	f = newResumeFixture(t, func(cmd string, _ json.RawMessage) any {
		if cmd == "query-migrate" {
			time.AfterFunc(300*time.Millisecond, f.q.exit)
			return qmpHangUp{}
		}
		return nil
	})
	err := f.m.Start(context.Background(), "web")
	var se *SavedStateError
	if !errors.As(err, &se) || se.Reason != SavedCorrupt || !strings.Contains(err.Error(), "QEMU exited while loading it") {
		t.Fatalf("Start: got %v; want a SavedStateError (corrupt): QEMU exited while loading it", err)
	}
	if !f.m.hasSaved(f.vm.Metadata.UID) {
		t.Error("the refused state is gone")
	}
}
