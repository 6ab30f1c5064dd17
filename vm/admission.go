package vm

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/yamlcheck"
	"go.yaml.in/yaml/v3"
)

// ErrInvalid is wrapped by every admission error: bad input, not a failure.
// It is errors.Is fielderr.ErrInvalid too, like every kind of bad input.
var ErrInvalid = fielderr.NewKind("invalid virtual machine")

// FieldError names the offending field and value (internal/fielderr's,
// shared with netcfg).
type FieldError = fielderr.FieldError

// ValidationError lists every problem found, so one run shows them all;
// vm's have Kind ErrInvalid, so errors.Is(err, ErrInvalid) is true.
type ValidationError = fielderr.ValidationError

// fieldErr is a FieldError.
func fieldErr(field string, value any, msg string) *FieldError {
	return &FieldError{Field: field, Value: value, Msg: msg}
}

// invalid is a ValidationError of kind ErrInvalid listing errs.
func invalid(errs ...*FieldError) *ValidationError { return fielderr.New(ErrInvalid, errs...) }

// Decode reads exactly one manifest, YAML or JSON, rejecting unknown
// fields and values of the wrong type by their path (spec.disks[0].size).
// A manifest with such a problem is still checked as Validate would (a
// copy, defaulted, without the host's limits): the error lists every
// problem at once, not the first kind found (a vm edit reopens with all).
func Decode(data []byte) (*VirtualMachine, error) {
	doc, err := yamlcheck.Document(data, "manifest")
	if errors.Is(err, yamlcheck.ErrMoreDocuments) {
		return nil, fmt.Errorf("%w: %v in the manifest; apply one VM per file", ErrInvalid, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var errs []*FieldError
	for _, p := range yamlcheck.Check(doc, reflect.TypeFor[VirtualMachine]()) {
		errs = append(errs, fieldErr(p.Field, p.Value, p.Msg))
	}
	errs = append(errs, givenZeros(doc)...)
	var vm VirtualMachine
	if err := doc.Decode(&vm); err != nil {
		var te *yaml.TypeError
		if len(errs) == 0 || !errors.As(err, &te) {
			// Check catches the type errors first; this is a backstop.
			return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlcheck.Message(err))
		}
		// a type error leaves its field zero and decodes the rest
	}
	if vm.APIVersion != APIVersion {
		errs = append(errs, fieldErr("apiVersion", vm.APIVersion, "want "+APIVersion))
	}
	if vm.Kind != Kind {
		errs = append(errs, fieldErr("kind", vm.Kind, "want "+Kind))
	}
	if len(errs) > 0 {
		return nil, invalid(append(errs, moreProblems(&vm, errs)...)...)
	}
	return &vm, nil
}

// givenZeros are the fields written as 0 whose zero Defaults reads as
// "unset": spec.cpus: 0 would silently become 1 CPU (the --cpus flag
// refuses 0 too), spec.memoryMiB: 0 512 MiB.
func givenZeros(doc *yaml.Node) []*FieldError {
	spec := mapValue(doc, "spec")
	var errs []*FieldError
	for _, f := range []struct{ key, msg string }{
		{"cpus", "must be at least 1 (leave it out for the default, 1)"},
		{"memoryMiB", "must be at least 16 (leave it out for the default, 512)"},
	} {
		if v := mapValue(spec, f.key); v != nil && v.Kind == yaml.ScalarNode && v.Tag == "!!int" {
			if n, err := strconv.ParseInt(v.Value, 0, 64); err == nil && n == 0 {
				errs = append(errs, fieldErr("spec."+f.key, 0, f.msg))
			}
		}
	}
	return errs
}

// mapValue is the value under key in mapping n (a document's root), nil
// when n is no mapping or has no such key.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// moreProblems are Validate's problems with vm (decoded as far as it
// goes) besides those on the fields found already: a copy is defaulted
// and checked without the host's limits; reserved labels are left to the
// update's check against the stored VM.
func moreProblems(vm *VirtualMachine, found []*FieldError) []*FieldError {
	c := *vm
	c.Metadata.Labels = nil
	for k, v := range vm.Metadata.Labels {
		if !strings.HasPrefix(k, ReservedLabelPrefix) {
			if c.Metadata.Labels == nil {
				c.Metadata.Labels = map[string]string{}
			}
			c.Metadata.Labels[k] = v
		}
	}
	Defaults(&c)
	var ve *ValidationError
	if !errors.As(Validate(&c, Limits{}), &ve) {
		return nil
	}
	var out []*FieldError
	for _, fe := range ve.Errs {
		if !slices.ContainsFunc(found, func(f *FieldError) bool {
			return f.Field == fe.Field || strings.HasPrefix(fe.Field, f.Field+".") || strings.HasPrefix(fe.Field, f.Field+"[")
		}) {
			out = append(out, fe)
		}
	}
	return out
}

// Defaults fills unset fields.
func Defaults(vm *VirtualMachine) {
	if vm.APIVersion == "" {
		vm.APIVersion = APIVersion
	}
	if vm.Kind == "" {
		vm.Kind = Kind
	}
	s := &vm.Spec
	if s.CPUs == 0 {
		s.CPUs = 1
	}
	if s.MemoryMiB == 0 {
		s.MemoryMiB = 512
	}
	if s.Machine == "" {
		s.Machine = "q35"
	}
	if s.Accel == "" {
		s.Accel = "auto"
	}
	if s.Firmware == "" {
		// Direct kernel boot needs no firmware boot manager; cloud images
		// boot UEFI (some no longer boot through BIOS at all).
		if s.Boot != nil && s.Boot.Kernel != "" {
			s.Firmware = "bios"
		} else {
			s.Firmware = "uefi"
		}
	}
	// An empty list is no list: the store omits it, and an identical
	// re-apply must compare equal to what the store gives back.
	if len(s.Disks) == 0 {
		s.Disks = nil
	}
	if len(s.Network) == 0 {
		s.Network = nil
	}
	if st := s.Startup; st != nil && st.Order == 0 && (st.Delay == nil || st.Delay.D() == 0) {
		s.Startup = nil // an empty startup is none
	}
	if len(vm.Metadata.Labels) == 0 {
		vm.Metadata.Labels = nil
	}
	for i := range s.Network {
		if s.Network[i].Model == "" {
			s.Network[i].Model = "virtio"
		}
	}
	for i := range s.Disks {
		if s.Disks[i].Name == "" {
			s.Disks[i].Name = fmt.Sprintf("disk%d", i)
		}
	}
}

// Limits are the host's capacity for validation; zero means unknown.
type Limits struct {
	CPUs      int
	MemoryMiB int
	// FileExists checks host files named in the spec (kernel, initrd).
	FileExists func(path string) error
	// ISO checks spec.cdrom.iso on the host (a regular ISO 9660 file);
	// nil: only its form (an absolute path) is checked.
	ISO func(path string) error
}

var (
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	labelKeyRE = regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	ifNameRE   = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)
	labelValRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
)

// ValidateName checks a VM (or image, disk) name: letters, digits and '-',
// 1 to 63 characters, starting and ending with a letter or digit.
func ValidateName(field, name string) *FieldError {
	if !nameRE.MatchString(name) {
		return fieldErr(field, name, "must be 1-63 letters, digits or '-', starting and ending with a letter or digit")
	}
	return nil
}

// Validate checks a defaulted manifest. Every error names field and value.
// A label under ReservedLabelPrefix is refused: only virtcon sets those.
func Validate(vm *VirtualMachine, lim Limits) error { return validate(vm, nil, lim) }

// ValidateUpdate checks a defaulted manifest that updates stored: as
// Validate, except that a reserved label equal to the stored one is
// accepted (a `virt vm show -o yaml | virt apply -f -` round trip).
func ValidateUpdate(in, stored *VirtualMachine, lim Limits) error { return validate(in, stored, lim) }

// reservedLabelErr is the error for reserved label k of in, nil when it
// is stored's own value (stored nil: a create, where none is allowed).
func reservedLabelErr(in, stored *VirtualMachine, k string) *FieldError {
	f := "metadata.labels[" + k + "]"
	if stored == nil {
		return fieldErr(f, k, "the "+ReservedLabelPrefix+" prefix is reserved for virtcon")
	}
	was, ok := stored.Metadata.Labels[k]
	switch {
	case !ok:
		return fieldErr(f, k, "the "+ReservedLabelPrefix+" prefix is reserved for virtcon")
	case was != in.Metadata.Labels[k]:
		return fieldErr(f, in.Metadata.Labels[k], fmt.Sprintf("is set by virtcon (stored %q) and cannot be changed; leave it out or give the stored value", was))
	}
	return nil
}

// mergeReserved is in's user labels with stored's reserved ones: a local
// edit never drops or changes what virtcon set. Nil when empty, as
// Defaults leaves an empty map.
func mergeReserved(in, stored *VirtualMachine) map[string]string {
	out := map[string]string{}
	for k, v := range in.Metadata.Labels {
		if !strings.HasPrefix(k, ReservedLabelPrefix) {
			out[k] = v
		}
	}
	for k, v := range stored.Metadata.Labels {
		if strings.HasPrefix(k, ReservedLabelPrefix) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func validate(vm, stored *VirtualMachine, lim Limits) error {
	var errs []*FieldError
	add := func(fe *FieldError) {
		if fe != nil {
			errs = append(errs, fe)
		}
	}
	add(ValidateName("metadata.name", vm.Metadata.Name))
	if looksLikeUID(vm.Metadata.Name) {
		// a name is a label and the UID the identity: a name shaped like a
		// UID would let one VM answer to another's identity
		add(fieldErr("metadata.name", vm.Metadata.Name, "must not have the shape of a UUID (UUIDs are VM identities)"))
	}
	if vm.Metadata.UID != "" {
		if _, err := uuid.Parse(vm.Metadata.UID); err != nil || len(vm.Metadata.UID) != 36 {
			add(fieldErr("metadata.uid", vm.Metadata.UID, "must be a UUID like 123e4567-e89b-12d3-a456-426614174000"))
		}
	}
	keys := make([]string, 0, len(vm.Metadata.Labels))
	for k := range vm.Metadata.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := "metadata.labels[" + k + "]"
		switch {
		case strings.HasPrefix(k, ReservedLabelPrefix):
			add(reservedLabelErr(vm, stored, k))
		case !labelKeyRE.MatchString(k):
			add(fieldErr(f, k, "label keys are [prefix/]name with letters, digits, '-', '_' and '.'"))
		case !labelValRE.MatchString(vm.Metadata.Labels[k]):
			add(fieldErr(f, vm.Metadata.Labels[k], "label values are at most 63 letters, digits, '-', '_' and '.'"))
		}
	}
	s := vm.Spec
	switch {
	case s.CPUs < 1:
		add(fieldErr("spec.cpus", s.CPUs, "must be at least 1"))
	case s.CPUs > 255:
		add(fieldErr("spec.cpus", s.CPUs, "must be at most 255"))
	case lim.CPUs > 0 && s.CPUs > lim.CPUs:
		add(fieldErr("spec.cpus", s.CPUs, fmt.Sprintf("the host has %d CPUs", lim.CPUs)))
	}
	switch {
	case s.MemoryMiB < MinMemoryMiB:
		add(fieldErr("spec.memoryMiB", s.MemoryMiB, fmt.Sprintf("must be at least %d", MinMemoryMiB)))
	case lim.MemoryMiB > 0 && s.MemoryMiB > lim.MemoryMiB:
		add(fieldErr("spec.memoryMiB", s.MemoryMiB, fmt.Sprintf("the host has %d MiB", lim.MemoryMiB)))
	}
	if s.Firmware != "uefi" && s.Firmware != "bios" {
		add(fieldErr("spec.firmware", s.Firmware, "must be uefi or bios"))
	}
	if s.Machine != "q35" {
		add(fieldErr("spec.machine", s.Machine, "must be q35"))
	}
	if s.Accel != "auto" && s.Accel != "kvm" && s.Accel != "tcg" {
		add(fieldErr("spec.accel", s.Accel, "must be auto, kvm or tcg"))
	}
	seen := map[string]bool{}
	for i, d := range s.Disks {
		f := fmt.Sprintf("spec.disks[%d]", i)
		add(ValidateName(f+".name", d.Name))
		if seen[strings.ToLower(d.Name)] {
			add(fieldErr(f+".name", d.Name, "duplicate disk name"))
		}
		seen[strings.ToLower(d.Name)] = true
		if d.Image != "" {
			add(ValidateName(f+".image", d.Image))
		}
		if d.Size != "" {
			if n, err := ParseSize(d.Size); err != nil || n < 1<<20 {
				add(fieldErr(f+".size", d.Size, "must be a size like 512M, 10G or 1T (at least 1M)"))
			}
		}
		if d.Image == "" && d.Size == "" {
			add(fieldErr(f, d.Name, "needs an image, a size, or both"))
		}
	}
	if b := s.Boot; b != nil {
		if b.Kernel == "" {
			add(fieldErr("spec.boot.kernel", b.Kernel, "is required when boot is set"))
		}
		for _, p := range []struct{ field, path string }{{"spec.boot.kernel", b.Kernel}, {"spec.boot.initrd", b.Initrd}} {
			if p.path == "" {
				continue
			}
			if !filepath.IsAbs(p.path) {
				add(fieldErr(p.field, p.path, "must be an absolute path"))
			} else if lim.FileExists != nil {
				if err := lim.FileExists(p.path); err != nil {
					add(fieldErr(p.field, p.path, err.Error()))
				}
			}
		}
	}
	if c := s.CDROM; c != nil && c.ISO != "" {
		add(isoFieldError(c.ISO, lim.ISO))
	}
	switch s.Display {
	case "", DisplayNone, DisplayVNC:
	default:
		add(fieldErr("spec.display", s.Display, "must be none or vnc"))
	}
	if (s.Boot == nil || s.Boot.Kernel == "") && !hasImageDisk(s.Disks) && !bootsFromCD(s) {
		add(fieldErr("spec", nil, "nothing to boot: give a disk with an image, boot.kernel, or cdrom.iso (an installer ISO, with a blank disk to install to)"))
	}
	if st := s.Startup; st != nil {
		if st.Order < 0 || st.Order > MaxStartupOrder {
			add(fieldErr("spec.startup.order", st.Order, fmt.Sprintf("must be between 0 and %d", MaxStartupOrder)))
		}
		if st.Delay != nil && st.Delay.D() > MaxStartupDelay {
			add(fieldErr("spec.startup.delay", st.Delay.String(), "must be at most "+MaxStartupDelay.String()))
		}
	}
	for i, n := range s.Network {
		f := fmt.Sprintf("spec.network[%d]", i)
		switch {
		case (n.Bridge == "") == (n.Network == ""):
			add(fieldErr(f, n.Bridge+n.Network, "give exactly one of bridge or network"))
		case n.Bridge != "" && !ifNameRE.MatchString(n.Bridge):
			add(fieldErr(f+".bridge", n.Bridge, "must be an interface name (1-15 letters, digits, '.', '-', '_')"))
		case isNoNetwork(n.Network):
			add(fieldErr(f+".network", n.Network, noNetworkMsg))
		case n.Network != "":
			add(ValidateName(f+".network", n.Network))
		}
		if n.MAC != "" {
			hw, err := net.ParseMAC(n.MAC)
			if err != nil || len(hw) != 6 || hw[0]&1 == 1 {
				add(fieldErr(f+".mac", n.MAC, "must be a unicast Ethernet address like 52:54:00:12:34:56"))
			}
		}
		if n.Model != "virtio" && n.Model != "e1000" {
			add(fieldErr(f+".model", n.Model, "must be virtio or e1000"))
		}
	}
	if len(errs) > 0 {
		return invalid(errs...)
	}
	return nil
}

// NoNetwork ("none") names no VM network: the user-mode networking a VM
// without spec.network gets (virt vm create --network none asks for it);
// as a NIC's network it is refused at admission, not at the next start.
const NoNetwork = "none"

const noNetworkMsg = "is no network: leave spec.network out for QEMU user-mode networking (outbound only)"

func isNoNetwork(network string) bool { return strings.EqualFold(network, NoNetwork) }

// Bounds of spec.startup.
const (
	MaxStartupOrder = 9999
	MaxStartupDelay = time.Hour
)

func hasImageDisk(ds []Disk) bool {
	for _, d := range ds {
		if d.Image != "" {
			return true
		}
	}
	return false
}

// bootsFromCD: the VM boots an ISO in its CD drive (an installer or a
// live CD), or has a CD drive and a disk, which an installer filled (the
// drive ejected once the installation was done).
func bootsFromCD(s Spec) bool {
	return s.CDROM != nil && (s.CDROM.ISO != "" || len(s.Disks) > 0)
}
