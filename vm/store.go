package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/paths"
	"go.yaml.in/yaml/v3"
)

// ErrNotFound is returned for a VM or image that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned when a name is taken.
var ErrExists = errors.New("already exists")

const specFile = "vm.yaml"

// store keeps manifests under <state>/vms/<uid>/vm.yaml (0600: cloud-init
// user data is a secret).
type store struct {
	layout paths.Layout
}

func (s store) specPath(uid string) string { return filepath.Join(s.layout.VMStateDir(uid), specFile) }

func (s store) load(uid string) (*VirtualMachine, error) {
	b, err := os.ReadFile(s.specPath(uid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("vm %s: %w", uid, ErrNotFound)
		}
		return nil, fmt.Errorf("vm %s: %w", uid, err)
	}
	var vm VirtualMachine
	if err := yaml.Unmarshal(b, &vm); err != nil {
		return nil, fmt.Errorf("vm %s: corrupt %s: %w", uid, s.specPath(uid), err)
	}
	if vm.Metadata.UID != uid {
		return nil, fmt.Errorf("vm %s: %s holds uid %q", uid, s.specPath(uid), vm.Metadata.UID)
	}
	return &vm, nil
}

// encodeVM marshals a manifest so that it reads back equal. yaml.v3
// writes a multi-line string that starts with a tab as a block scalar it
// then refuses to read; such a manifest is written as JSON (which is
// YAML too, every string double-quoted) instead.
func encodeVM(vm *VirtualMachine) ([]byte, error) {
	b, err := yaml.Marshal(vm)
	if err != nil {
		return nil, err
	}
	if readsBack(b, vm) {
		return b, nil
	}
	j, err := json.MarshalIndent(vm, "", "  ")
	if err != nil {
		return nil, err
	}
	// JSON leaves some characters raw that YAML refuses or reads as line
	// breaks (DEL, C1 controls, NEL, BOM): escape all but printable ASCII.
	var out bytes.Buffer
	for _, r := range string(j) {
		switch {
		case r == '\n' || (r >= 0x20 && r < 0x7f):
			out.WriteRune(r)
		case r > 0xffff:
			fmt.Fprintf(&out, `\U%08x`, r)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	if !readsBack(out.Bytes(), vm) {
		return nil, errors.New("the manifest does not survive YAML encoding (invalid UTF-8 next to a line starting with a tab?)")
	}
	return out.Bytes(), nil
}

func readsBack(b []byte, vm *VirtualMachine) bool {
	var back VirtualMachine
	return yaml.Unmarshal(b, &back) == nil && reflect.DeepEqual(back.Spec, vm.Spec)
}

func (s store) save(vm *VirtualMachine) error { return s.write(vm, atomicfile.Write) }

// saveIntent records an intent (spec.running before a start) atomically
// but without fsync: it must survive a killed virt, which the page cache
// guarantees, and the durable save after the start confirms it.
func (s store) saveIntent(vm *VirtualMachine) error { return s.write(vm, atomicfile.WriteVolatile) }

func (s store) write(vm *VirtualMachine, write func(string, []byte, os.FileMode) error) error {
	b, err := encodeVM(vm)
	if err != nil {
		return fmt.Errorf("vm %q: encode: %w", vm.Metadata.Name, err)
	}
	if err := os.MkdirAll(s.layout.VMStateDir(vm.Metadata.UID), 0o700); err != nil {
		return fmt.Errorf("vm %q: %w", vm.Metadata.Name, err)
	}
	return write(s.specPath(vm.Metadata.UID), b, 0o600)
}

// uids lists the directories under <state>/vms.
func (s store) uids() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.layout.StateDir(), "vms"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// list loads every manifest; unreadable ones are returned as errors
// alongside the rest.
func (s store) list() ([]*VirtualMachine, []error) {
	uids, err := s.uids()
	if err != nil {
		return nil, []error{err}
	}
	var vms []*VirtualMachine
	var errs []error
	for _, uid := range uids {
		if !s.exists(uid) {
			continue // a directory without a spec is an orphan, not a VM
		}
		vm, err := s.load(uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vms = append(vms, vm)
	}
	sort.Slice(vms, func(i, j int) bool {
		return strings.ToLower(vms[i].Metadata.Name) < strings.ToLower(vms[j].Metadata.Name)
	})
	return vms, errs
}

func (s store) exists(uid string) bool {
	_, err := os.Stat(s.specPath(uid))
	return err == nil
}

// find resolves a name (case-insensitively) or a UID.
func (s store) find(ref string) (*VirtualMachine, error) {
	if len(ref) == 36 && s.exists(ref) {
		return s.load(ref)
	}
	vms, _ := s.list()
	for _, vm := range vms {
		if strings.EqualFold(vm.Metadata.Name, ref) {
			return vm, nil
		}
	}
	return nil, fmt.Errorf("vm %q: %w", ref, ErrNotFound)
}

func (s store) lockPath(name string) string {
	return filepath.Join(s.layout.RunDir(), "locks", name+".lock")
}

// lockTimeout bounds every wait for a lock: a stuck holder makes the
// caller fail with ErrLocked instead of hanging.
const lockTimeout = 2 * time.Minute

func (s store) lockVM(ctx context.Context, uid string) (*flock.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	return flock.Acquire(ctx, s.lockPath("vm-"+uid))
}

func (s store) lockGlobal(ctx context.Context) (*flock.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	return flock.Acquire(ctx, s.lockPath("global"))
}
