package vm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/redact"
	"github.com/virtcon/virtcon/internal/revert"
)

// Create admits a new VM (defaults, validation, unique name), creates its
// disks and stores it. Nothing is left behind if any step fails.
func (m *Manager) Create(ctx context.Context, vm *VirtualMachine) (*VirtualMachine, error) {
	return m.CreateWith(ctx, vm, CreateOptions{})
}

// CreateOptions are what a create from afar (the agent's create-vm task)
// adds to Create.
type CreateOptions struct {
	// DirectorGeneration, when set, is stored as the
	// LabelDirectorGeneration label (label-value syntax). It is set after
	// validation: a manifest itself still cannot carry virtcon.io/ labels.
	DirectorGeneration string
	// Remote marks a manifest that did not come from this host's own
	// operator: spec.boot.kernel and spec.boot.initrd must then resolve
	// (symlinks followed) to files inside the host's images directory,
	// so a director cannot boot a guest from an arbitrary host file.
	Remote bool
}

// CreateWith is Create with opts.
func (m *Manager) CreateWith(ctx context.Context, vm *VirtualMachine, opts CreateOptions) (*VirtualMachine, error) {
	Defaults(vm)
	vm.Metadata.Generation = 0
	vm.Status = Status{}
	if err := Validate(vm, m.limits(ctx)); err != nil {
		return nil, err
	}
	if opts.Remote {
		if err := m.checkRemoteBoot(vm); err != nil {
			return nil, err
		}
	}
	if g := opts.DirectorGeneration; g != "" {
		if !labelValRE.MatchString(g) {
			return nil, invalid(fieldErr("metadata.labels["+LabelDirectorGeneration+"]", g, "label values are at most 63 letters, digits, '-', '_' and '.'"))
		}
		labels := make(map[string]string, len(vm.Metadata.Labels)+1)
		maps.Copy(labels, vm.Metadata.Labels)
		labels[LabelDirectorGeneration] = g
		vm.Metadata.Labels = labels
	}
	if err := checkUserDataMask(vm.Spec.CloudInit, nil); err != nil {
		return nil, err
	}
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return nil, err
	}
	defer g.Release()
	// Lower-case before the checks: the store's directories are lower-case,
	// and an upper-case UID must not slip past exists() onto another VM.
	vm.Metadata.UID = strings.ToLower(vm.Metadata.UID)
	if err := m.checkNameFree(vm.Metadata.Name, vm.Metadata.UID); err != nil {
		return nil, err
	}
	if vm.Metadata.UID == "" {
		vm.Metadata.UID = uuid.NewString()
	} else if ok, err := m.store.exists(vm.Metadata.UID); err != nil {
		return nil, err
	} else if ok {
		return nil, invalid(fieldErr("metadata.uid", vm.Metadata.UID, "a VM with this uid exists"))
	}
	now := time.Now().UTC().Truncate(time.Second)
	vm.Metadata.CreationTimestamp = &now
	vm.Metadata.Generation = 1
	fillMACs(vm)
	running := vm.Spec.Running
	vm.Spec.Running = false

	r := revert.New()
	defer r.Fail()
	dir := m.layout().VMStateDir(vm.Metadata.UID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vm %q: create: %w", vm.Metadata.Name, err)
	}
	r.Add(func() error { return os.RemoveAll(dir) })
	if err := m.createDisks(ctx, vm, vm.Spec.Disks); err != nil {
		return nil, fmt.Errorf("vm %q: create: %w", vm.Metadata.Name, err)
	}
	if err := m.store.save(vm); err != nil {
		return nil, err
	}
	r.Success()
	m.log.Info("vm created", "vm", vm.Metadata.Name, "uid", vm.Metadata.UID)
	if running {
		if err := m.Start(ctx, vm.Metadata.UID); err != nil {
			return vm, &NotStartedError{Name: vm.Metadata.Name, UID: vm.Metadata.UID, Err: err}
		}
		return m.store.load(vm.Metadata.UID)
	}
	return vm, nil
}

// checkRemoteBoot refuses a kernel, initrd or CD ISO outside the images
// directory (after following symlinks: a link in images/ to /etc/shadow
// is outside; another VM's seed ISO, with its user data, is outside).
func (m *Manager) checkRemoteBoot(vm *VirtualMachine) error {
	type hostFile struct{ field, path string }
	var files []hostFile
	if b := vm.Spec.Boot; b != nil {
		files = append(files, hostFile{"spec.boot.kernel", b.Kernel}, hostFile{"spec.boot.initrd", b.Initrd})
	}
	if c := vm.Spec.CDROM; c != nil {
		files = append(files, hostFile{"spec.cdrom.iso", c.ISO})
	}
	if len(files) == 0 {
		return nil
	}
	images := m.layout().ImagesDir()
	dir, dirErr := filepath.EvalSymlinks(images)
	var errs []*FieldError
	for _, p := range files {
		if p.path == "" {
			continue
		}
		msg := "must be a file in the host's images directory " + images + " (a manifest from the director)"
		if dirErr != nil {
			errs = append(errs, fieldErr(p.field, p.path, msg+": "+dirErr.Error()))
			continue
		}
		real, err := filepath.EvalSymlinks(p.path)
		if err != nil {
			errs = append(errs, fieldErr(p.field, p.path, msg+": "+err.Error()))
			continue
		}
		if rel, err := filepath.Rel(dir, real); err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			if real != p.path {
				msg += "; it resolves to " + real
			}
			errs = append(errs, fieldErr(p.field, p.path, msg))
		}
	}
	if len(errs) > 0 {
		return invalid(errs...)
	}
	return nil
}

// NotStartedError is a create (or apply) that made the VM but could not
// start it: the VM exists, stopped, and the cause is Err.
type NotStartedError struct {
	Name, UID string
	Err       error
}

func (e *NotStartedError) Error() string {
	return fmt.Sprintf("vm %q was created (uid %s) but did not start: %v", e.Name, e.UID, e.Err)
}

func (e *NotStartedError) Unwrap() error { return e.Err }

// checkNameFree fails closed: while any spec cannot be read, no name can
// be said to be free (the unreadable VM may carry it).
func (m *Manager) checkNameFree(name, exceptUID string) error {
	vms, errs := m.store.list()
	if len(errs) > 0 {
		return fmt.Errorf("vm %q: cannot check that the name is free: %w", name, errors.Join(errs...))
	}
	for _, o := range vms {
		if strings.EqualFold(o.Metadata.Name, name) && o.Metadata.UID != exceptUID {
			return invalid(fieldErr("metadata.name", name, fmt.Sprintf("taken by VM %s (names are unique regardless of case)", o.Metadata.UID)))
		}
	}
	return nil
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	VM     *VirtualMachine `json:"vm"`
	Action string          `json:"action"` // created, configured, unchanged
}

// Apply creates or updates a VM from a decoded manifest, then brings the
// process to spec.running.
func (m *Manager) Apply(ctx context.Context, in *VirtualMachine) (*ApplyResult, error) {
	Defaults(in)
	// the store only: a guest virtcon does not manage (EXTERNAL) by that
	// name is no VM of ours to update, and no reason not to create one
	existing, err := m.store.find(in.Metadata.Name)
	if in.Metadata.UID != "" {
		existing, err = m.store.load(strings.ToLower(in.Metadata.UID))
	}
	if errors.Is(err, ErrNotFound) {
		vm, err := m.Create(ctx, in)
		if err != nil {
			return nil, err
		}
		return &ApplyResult{VM: vm, Action: "created"}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := ValidateUpdate(in, existing, m.limits(ctx)); err != nil {
		return nil, err
	}
	renames := func(v *VirtualMachine) bool { return !strings.EqualFold(in.Metadata.Name, v.Metadata.Name) }
	var g *flock.Lock
	if renames(existing) {
		// the new name must stay free until it is stored, as in Create
		// (the global lock before the VM's, as everywhere)
		if g, err = m.store.lockGlobal(ctx); err != nil {
			return nil, err
		}
		defer g.Release()
	}
	l, err := m.store.lockVM(ctx, existing.Metadata.UID)
	if err != nil {
		return nil, err
	}
	vm, err := m.store.load(existing.Metadata.UID)
	if err != nil {
		l.Release()
		return nil, err
	}
	if renames(vm) {
		if g == nil { // renamed by someone else since it was looked up
			l.Release()
			return nil, fmt.Errorf("vm %q: apply: renamed to %q meanwhile; apply again", existing.Metadata.Name, vm.Metadata.Name)
		}
		if err := m.checkNameFree(in.Metadata.Name, vm.Metadata.UID); err != nil {
			l.Release()
			return nil, err
		}
	}
	// a manifest printed by `virt vm show` carries the user data masked:
	// keep what is stored rather than write the mask
	if err := checkUserDataMask(in.Spec.CloudInit, vm.Spec.CloudInit); err != nil {
		l.Release()
		return nil, err
	}
	if in.Spec.CloudInit != nil && in.Spec.CloudInit.UserData == redact.Mask {
		ci := *in.Spec.CloudInit
		ci.UserData = vm.Spec.CloudInit.UserData
		in.Spec.CloudInit = &ci
	}
	// reserved labels are the store's: checked again against the spec
	// read under the lock, then kept whatever the input said
	for k := range in.Metadata.Labels {
		if strings.HasPrefix(k, ReservedLabelPrefix) {
			if fe := reservedLabelErr(in, vm, k); fe != nil {
				l.Release()
				return nil, invalid(fe)
			}
		}
	}
	in.Metadata.Labels = mergeReserved(in, vm)
	res := &ApplyResult{VM: vm, Action: "unchanged"}
	changed := !reflect.DeepEqual(in.Spec, vm.Spec) || in.Metadata.Name != vm.Metadata.Name || !reflect.DeepEqual(in.Metadata.Labels, vm.Metadata.Labels)
	if changed {
		if err := diskChangeAllowed(vm.Spec.Disks, in.Spec.Disks); err != nil {
			l.Release()
			return nil, err
		}
		added := in.Spec.Disks[len(vm.Spec.Disks):]
		if err := m.createDisks(ctx, vm, added); err != nil {
			l.Release()
			return nil, fmt.Errorf("vm %q: apply: %w", vm.Metadata.Name, err)
		}
		if !reflect.DeepEqual(in.Spec, vm.Spec) {
			vm.Metadata.Generation++
		}
		vm.Metadata.Name, vm.Metadata.Labels, vm.Spec = in.Metadata.Name, in.Metadata.Labels, in.Spec
		fillMACs(vm)
		if err := m.store.save(vm); err != nil {
			l.Release()
			return nil, err
		}
		res.Action = "configured"
	}
	l.Release()
	alive := m.livePID(vm.Metadata.UID) > 0
	switch {
	case vm.Spec.Running && !alive:
		err = m.Start(ctx, vm.Metadata.UID)
	case !vm.Spec.Running && alive:
		// running: false is reached whatever the guest does: the power
		// button, then QEMU ended after the default grace
		err = m.Stop(ctx, vm.Metadata.UID, StopOptions{Timeout: DefaultStopTimeout, Force: true})
	}
	if err != nil {
		return res, err
	}
	res.VM, err = m.store.load(vm.Metadata.UID)
	return res, err
}

// checkUserDataMask refuses the mask that `virt vm show` prints in place
// of user data when there is no stored user data for it to stand for: a
// copied manifest would otherwise seed the literal text as user data.
func checkUserDataMask(in, stored *CloudInit) error {
	if in == nil || in.UserData != redact.Mask || (stored != nil && stored.UserData != "") {
		return nil
	}
	fe := fieldErr("spec.cloudInit.userData", redact.Mask,
		"is the placeholder shown in place of hidden user data, and this VM has none stored to keep: give the user data itself")
	fe.Kind = ErrUserDataMask
	return invalid(fe)
}

// ErrUserDataMask marks the field error of a user-data placeholder that
// stands for no stored user data (a face says where the real one is).
var ErrUserDataMask = fielderr.NewKind("user data placeholder without stored user data", ErrInvalid)

// fillMACs gives every NIC without a MAC its stable generated one.
func fillMACs(vm *VirtualMachine) {
	for i := range vm.Spec.Network {
		if vm.Spec.Network[i].MAC == "" {
			vm.Spec.Network[i].MAC = MACFor(vm.Metadata.UID, i)
		}
	}
}

func diskChangeAllowed(old, new []Disk) error {
	if len(new) < len(old) {
		return invalid(fieldErr("spec.disks", len(new), fmt.Sprintf("disks cannot be removed by apply (the VM has %d); detach them by deleting and recreating the VM", len(old))))
	}
	for i := range old {
		if old[i].Name != new[i].Name || old[i].Image != new[i].Image {
			return invalid(fieldErr(fmt.Sprintf("spec.disks[%d]", i), new[i].Name, "an existing disk's name and image cannot change"))
		}
	}
	return nil
}
