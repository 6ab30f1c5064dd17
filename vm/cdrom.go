package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/virtcon/virtcon/internal/iso9660"
	"github.com/virtcon/virtcon/qmp"
)

// ErrNoCDROM is what a CD operation on a VM without a CD drive is
// (errors.Is): bad input, like ErrInvalid.
var ErrNoCDROM = errors.New("the VM has no CD drive")

// NoCDROMError is a CD operation on a VM without a CD drive (spec.cdrom
// unset, or a running QEMU started without one). Running: the VM runs,
// and a drive is only added while it is stopped.
type NoCDROMError struct {
	Name, Op string
	Running  bool
}

func (e *NoCDROMError) Error() string {
	if e.Running {
		return fmt.Sprintf("vm %q: cdrom %s: the running VM has no CD drive (one is added while the VM is stopped)", e.Name, e.Op)
	}
	return fmt.Sprintf("vm %q: cdrom %s: %v", e.Name, e.Op, ErrNoCDROM)
}

// Is makes errors.Is(err, ErrNoCDROM) and errors.Is(err, ErrInvalid) true.
func (e *NoCDROMError) Is(target error) bool { return target == ErrNoCDROM || target == ErrInvalid }

// checkISO is what an ISO for the CD drive must be: an absolute path to a
// regular file (symlinks followed: a "current.iso" link is common, and the
// file it names is what is checked) holding an ISO 9660 volume descriptor.
// Devices, directories, sockets and pipes are refused: QEMU opens the
// path as root, and a CD is a file.
func checkISO(path string) error {
	if !filepath.IsAbs(path) {
		return errors.New("must be an absolute path")
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such file")
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("is a directory, not an ISO image file")
	case !st.Mode().IsRegular():
		return fmt.Errorf("is not a regular file (%s)", fileKind(st.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := iso9660.Probe(f); err != nil {
		if errors.Is(err, iso9660.ErrNotISO9660) {
			return errors.New("is not an ISO 9660 image (no CD001 volume descriptor at sector 16)")
		}
		return err
	}
	return nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	}
	return "mode " + m.Type().String()
}

// isoFieldError is the admission error of spec.cdrom.iso, nil when it is
// fine. check nil: only the path's form is checked (no host to look at).
func isoFieldError(iso string, check func(string) error) *FieldError {
	if !filepath.IsAbs(iso) {
		return fieldErr("spec.cdrom.iso", iso, "must be an absolute path")
	}
	if check != nil {
		if err := check(iso); err != nil {
			return fieldErr("spec.cdrom.iso", iso, err.Error())
		}
	}
	return nil
}

// CDROMChange is what a cdrom eject or insert did.
type CDROMChange struct {
	Name string `json:"name" yaml:"name"`
	// ISO is in the drive now ("" : empty); Previous was before.
	ISO      string `json:"iso" yaml:"iso"`
	Previous string `json:"previous,omitempty" yaml:"previous,omitempty"`
	// Live: the running QEMU's drive was changed too (else the spec
	// only, realised at the next start).
	Live bool `json:"live" yaml:"live"`
	// Forced: the guest had locked the tray (a mounted CD) and it was
	// opened regardless.
	Forced bool `json:"forced,omitempty" yaml:"forced,omitempty"`
	// Added: the stopped VM had no CD drive; one was added to its spec.
	Added bool `json:"added,omitempty" yaml:"added,omitempty"`
	// AlreadyEmpty: an eject of a drive that held nothing (in the spec
	// and, running, in QEMU): nothing changed, not even the tray.
	AlreadyEmpty bool  `json:"alreadyEmpty,omitempty" yaml:"alreadyEmpty,omitempty"`
	Generation   int64 `json:"generation" yaml:"generation"`
}

// EjectCDROM empties the VM's CD drive: on a running VM through QMP (the
// tray is forced open if the guest locked it), and in the spec
// (spec.cdrom.iso ""; the drive stays, so an installed VM keeps its
// device layout). Ejecting an empty drive changes nothing (AlreadyEmpty).
func (m *Manager) EjectCDROM(ctx context.Context, ref string) (*CDROMChange, error) {
	return m.changeCDROM(ctx, ref, "eject", "")
}

// InsertCDROM puts iso (an absolute path to an ISO 9660 file) in the
// VM's CD drive, replacing what was there: on a running VM through QMP,
// and in the spec. A stopped VM without a CD drive gets one (in its
// spec, realised at the next start); a running one without is refused.
func (m *Manager) InsertCDROM(ctx context.Context, ref, iso string) (*CDROMChange, error) {
	if fe := isoFieldError(iso, checkISO); fe != nil {
		return nil, invalid(fe)
	}
	return m.changeCDROM(ctx, ref, "insert", iso)
}

func (m *Manager) changeCDROM(ctx context.Context, ref, op, iso string) (*CDROMChange, error) {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer l.Release()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	ch := &CDROMChange{Name: name, ISO: iso, Generation: vm.Metadata.Generation}
	if vm.Spec.CDROM != nil {
		ch.Previous = vm.Spec.CDROM.ISO
	}
	live := m.livePID(uid) > 0
	switch {
	case vm.Spec.CDROM == nil && (op == "eject" || live):
		return nil, &NoCDROMError{Name: name, Op: op, Running: live}
	case vm.Spec.CDROM == nil && m.anySaved(uid):
		// a new device: the saved state could not be loaded into it
		return nil, fmt.Errorf("vm %q: cdrom %s: a CD drive cannot be added while the VM has a saved state (start it, or start --discard-saved, and stop it first)", name, op)
	case vm.Spec.CDROM == nil:
		ch.Added = true
	}
	realised := live && vm.Status.ObservedGeneration == vm.Metadata.Generation
	specISO := ch.Previous
	liveHad := ""
	if live {
		ch.Live = true
		var forced bool
		err := m.qmpDo(ctx, uid, func(ctx context.Context, mon *qmp.Monitor) error {
			var err error
			forced, liveHad, err = setMedium(ctx, mon, iso)
			return err
		})
		if err != nil {
			var nd *NoCDROMError
			if errors.As(err, &nd) {
				nd.Name, nd.Op = name, op
				return nil, nd
			}
			return nil, fmt.Errorf("vm %q: cdrom %s: %w", name, op, err)
		}
		ch.Forced = forced
		if ch.Previous == "" {
			ch.Previous = liveHad // a spec change not realised yet
		}
	}
	if !ch.Added && specISO == iso {
		ch.AlreadyEmpty = iso == "" && ch.Previous == ""
		return ch, nil // the spec has it already (the live drive now too)
	}
	prev := vm.Spec.CDROM
	vm.Spec.CDROM = &CDROM{ISO: iso}
	vm.Metadata.Generation++
	if realised {
		vm.Status.ObservedGeneration = vm.Metadata.Generation
	}
	if err := m.store.save(vm); err != nil {
		if live && prev != nil {
			// the drive goes back to what the spec still says
			if rerr := m.qmpDo(context.WithoutCancel(ctx), uid, func(ctx context.Context, mon *qmp.Monitor) error {
				_, _, err := setMedium(ctx, mon, prev.ISO)
				return err
			}); rerr != nil {
				err = errors.Join(err, fmt.Errorf("the running VM's drive was changed and could not be changed back: %w", rerr))
			}
		}
		return nil, fmt.Errorf("vm %q: cdrom %s: %w", name, op, err)
	}
	ch.Generation = vm.Metadata.Generation
	m.log.Info("vm cdrom changed", "vm", name, "op", op, "iso", iso, "live", live, "forced", ch.Forced)
	return ch, nil
}

// cdBlockInfo is the part of a query-block entry read here.
type cdBlockInfo struct {
	Device   string           `json:"device"`
	QDev     string           `json:"qdev"`
	Locked   bool             `json:"locked"`
	TrayOpen bool             `json:"tray_open"`
	Inserted *cdBlockInserted `json:"inserted"`
}

type cdBlockInserted struct {
	File string `json:"file"`
}

// cdromBlock finds the CD drive in query-block.
func cdromBlock(ctx context.Context, mon *qmp.Monitor) (*cdBlockInfo, error) {
	var blocks []cdBlockInfo
	if err := mon.Execute(ctx, "query-block", nil, &blocks); err != nil {
		return nil, fmt.Errorf("QMP query-block: %w", err)
	}
	for i, b := range blocks {
		if b.QDev == CDROMDeviceID || b.Device == CDROMDriveID {
			return &blocks[i], nil
		}
	}
	return nil, &NoCDROMError{Running: true}
}

// setMedium makes the live CD drive hold iso ("" : empty). The tray is
// opened with force: the host's operator decides what is in the drive,
// as with a physical eject button held down (forced says the guest had
// locked it). An insert closes the tray again, so the guest sees the
// new medium. had is the file the drive held before ("" : none); an
// eject of an empty drive does nothing (its tray stays as it is).
func setMedium(ctx context.Context, mon *qmp.Monitor, iso string) (forced bool, had string, err error) {
	b, err := cdromBlock(ctx, mon)
	if err != nil {
		return false, "", err
	}
	if b.Inserted != nil {
		had = b.Inserted.File
	}
	if iso == "" && b.Inserted == nil {
		return false, "", nil
	}
	forced, err = setTray(ctx, mon, b, iso)
	return forced, had, err
}

// setTray opens b's tray, takes its medium out and puts iso in ("": none).
func setTray(ctx context.Context, mon *qmp.Monitor, b *cdBlockInfo, iso string) (forced bool, err error) {
	forced = b.Locked
	if err := mon.Execute(ctx, "blockdev-open-tray", map[string]any{"id": CDROMDeviceID, "force": true}, nil); err != nil {
		return forced, fmt.Errorf("QMP blockdev-open-tray: %w", err)
	}
	if err := mon.Execute(ctx, "blockdev-remove-medium", map[string]any{"id": CDROMDeviceID}, nil); err != nil {
		return forced, fmt.Errorf("QMP blockdev-remove-medium: %w", err)
	}
	if iso == "" {
		return forced, nil
	}
	args := map[string]any{"id": CDROMDeviceID, "filename": iso, "format": "raw", "read-only-mode": "read-only"}
	if err := mon.Execute(ctx, "blockdev-change-medium", args, nil); err != nil {
		return forced, fmt.Errorf("QMP blockdev-change-medium: %w", err)
	}
	return forced, nil
}
