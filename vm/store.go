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

	"github.com/google/uuid"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/yamlcheck"
	"github.com/virtcon/virtcon/paths"
	"go.yaml.in/yaml/v3"
)

// ErrNotFound is returned for a VM or image that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned when a name is taken.
var ErrExists = errors.New("already exists")

// ErrAmbiguous is returned when a reference names one VM by its name and
// another by its UID: acting on either would be a guess.
var ErrAmbiguous = errors.New("ambiguous")

// SpecError is a spec that exists but cannot be read or makes no sense:
// the VM is there, so callers must fail closed rather than treat it as
// absent. Err wraps the cause (fs.ErrPermission when not root).
type SpecError struct {
	UID  string
	Path string
	Err  error
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("vm %s: spec %s: %v", e.UID, e.Path, e.Err)
}

func (e *SpecError) Unwrap() error { return e.Err }

// StoreError is a store directory that cannot be listed: no VM can be
// said to exist or not.
type StoreError struct {
	Path string
	Err  error
}

func (e *StoreError) Error() string { return fmt.Sprintf("vm store %s: %v", e.Path, e.Err) }
func (e *StoreError) Unwrap() error { return e.Err }

const specFile = "vm.yaml"

// The store frames every spec it writes with these lines. A spec that
// starts with the header but lacks the trailer was cut short (a disk
// that filled, a truncate by hand): YAML cut at a line boundary still
// parses, and would silently lose disks or NICs. Specs written before
// the framing have neither line and are read as they are.
const (
	specHeader  = "# virtcon VirtualMachine spec: written by virt, change it with virt apply -f\n"
	specTrailer = "# end of spec\n"
)

// store keeps manifests under <state>/vms/<uid>/vm.yaml (0600: cloud-init
// user data is a secret).
type store struct {
	layout paths.Layout
	// held records the VM locks this process holds (nil: none recorded;
	// see leftover.go)
	held *heldLocks
}

func (s store) specPath(uid string) string { return filepath.Join(s.layout.VMStateDir(uid), specFile) }

func (s store) load(uid string) (*VirtualMachine, error) {
	path := s.specPath(uid)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("vm %s: %w", uid, ErrNotFound)
		}
		return nil, &SpecError{UID: uid, Path: path, Err: err}
	}
	vm, err := decodeSpec(b, uid)
	if err != nil {
		return nil, &SpecError{UID: uid, Path: path, Err: err}
	}
	return vm, nil
}

// decodeSpec reads a stored spec and checks that it is whole and is the
// VM of directory uid.
func decodeSpec(b []byte, uid string) (*VirtualMachine, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty")
	}
	// the trailer starts a line of its own at column 0: a user-data line
	// that reads the same sits indented inside its block scalar
	if bytes.HasPrefix(b, []byte(specHeader)) && !bytes.HasSuffix(b, []byte("\n"+specTrailer)) {
		return nil, errors.New("cut short (no end-of-spec line)")
	}
	var vm VirtualMachine
	if err := yaml.Unmarshal(b, &vm); err != nil {
		return nil, fmt.Errorf("corrupt: %s", yamlcheck.SyntaxMessage(b, err))
	}
	switch {
	case vm.Metadata.UID != uid:
		return nil, fmt.Errorf("holds uid %q", vm.Metadata.UID)
	case vm.APIVersion != APIVersion || vm.Kind != Kind:
		return nil, fmt.Errorf("not a %s %s (apiVersion %q, kind %q)", APIVersion, Kind, vm.APIVersion, vm.Kind)
	case vm.Metadata.Name == "":
		return nil, errors.New("has no metadata.name")
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
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n') // the JSON form ends without one
	}
	b = append(append([]byte(specHeader), b...), specTrailer...)
	if err := os.MkdirAll(s.layout.VMStateDir(vm.Metadata.UID), 0o700); err != nil {
		return fmt.Errorf("vm %q: %w", vm.Metadata.Name, err)
	}
	return write(s.specPath(vm.Metadata.UID), b, 0o600)
}

// uids lists the directories under <state>/vms.
func (s store) uids() ([]string, error) {
	dir := filepath.Join(s.layout.StateDir(), "vms")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &StoreError{Path: dir, Err: err}
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// list loads every manifest. A spec that exists but cannot be read is a
// *SpecError in errs, never left out silently: the caller decides how to
// fail closed. A store that cannot be listed at all is err.
func (s store) list() (vms []*VirtualMachine, errs []error) {
	uids, err := s.uids()
	if err != nil {
		return nil, []error{err}
	}
	for _, uid := range uids {
		ok, err := s.exists(uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
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

// exists says whether uid has a spec. A spec that cannot even be
// stat'ed (a directory we may not enter) is an error, not absent.
func (s store) exists(uid string) (bool, error) {
	_, err := os.Stat(s.specPath(uid))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, &SpecError{UID: uid, Path: s.specPath(uid), Err: err}
	}
}

// looksLikeUID reports whether ref has the shape of a UUID, which VM
// names may not have.
func looksLikeUID(ref string) bool {
	_, err := uuid.Parse(ref)
	return err == nil && len(ref) == 36
}

// find resolves a name (case-insensitively) or a UID. It fails closed: a
// name that no readable spec carries, while some spec cannot be read, is
// an error naming that spec (it may be the VM asked for), not "not
// found"; a reference that is one VM's UID and another's name is
// ErrAmbiguous.
func (s store) find(ref string) (*VirtualMachine, error) {
	var byUID *VirtualMachine
	if looksLikeUID(ref) {
		uid := strings.ToLower(ref)
		vm, err := s.load(uid)
		switch {
		case err == nil:
			byUID = vm
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	vms, errs := s.list()
	var byName []*VirtualMachine
	for _, vm := range vms {
		if strings.EqualFold(vm.Metadata.Name, ref) {
			byName = append(byName, vm)
		}
	}
	switch {
	case len(byName) > 1:
		// names are unique since admission checks them under the global
		// lock, but older versions let duplicates in
		uids := make([]string, len(byName))
		for i, vm := range byName {
			uids[i] = vm.Metadata.UID
		}
		return nil, fmt.Errorf("vm %q: %w: %d VMs have this name (%s); use the UID of the one you mean",
			ref, ErrAmbiguous, len(byName), strings.Join(uids, ", "))
	case byUID != nil && len(byName) == 1 && byName[0].Metadata.UID != byUID.Metadata.UID:
		return nil, fmt.Errorf("vm %q: %w: it is the UID of VM %q and the name of VM %s; use the name %q for the first, the UID %s for the second",
			ref, ErrAmbiguous, byUID.Metadata.Name, byName[0].Metadata.UID, byUID.Metadata.Name, byName[0].Metadata.UID)
	case byUID != nil:
		return byUID, nil
	case len(byName) == 1:
		// names are unique (checked under the global lock), so an
		// unreadable spec cannot be another VM of this name
		return byName[0], nil
	case len(errs) > 0:
		return nil, fmt.Errorf("vm %q: cannot tell whether it exists: %w", ref, errors.Join(errs...))
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
	l, err := flock.Acquire(ctx, s.lockPath("vm-"+uid))
	if err == nil {
		s.held.add(uid, l)
	}
	return l, err
}

func (s store) lockGlobal(ctx context.Context) (*flock.Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	return flock.Acquire(ctx, s.lockPath("global"))
}
