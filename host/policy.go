package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/yamlcheck"
	"github.com/virtcon/virtcon/paths"
	"go.yaml.in/yaml/v3"
)

// The host policy file, /etc/virtcon/host.yaml: what happens to the VMs
// when the host boots and when it goes down.
const (
	PolicyAPIVersion = "virtcon/v1"
	PolicyKind       = "HostPolicy"
	policyFile       = "host.yaml"
)

// OnBoot values.
const (
	// OnBootAutostart starts the VMs whose spec.autostart is set.
	OnBootAutostart = "autostart"
	// OnBootRestore starts the VMs that ran at the last clean shutdown,
	// and the autostart ones.
	OnBootRestore = "restore"
)

// OnShutdown values.
const (
	// OnShutdownShutdown powers guests off by ACPI, quitting those still
	// up at the deadline.
	OnShutdownShutdown = "shutdown"
	// OnShutdownSave saves each guest's RAM and device state to disk; the
	// next boot resumes it.
	OnShutdownSave = "save"
	// OnShutdownKill stops the QEMU processes at once.
	OnShutdownKill = "kill"
)

// Policy defaults, as libvirt-guests has them where it has them.
const (
	DefaultShutdownTimeout  = 300 * time.Second
	DefaultParallelShutdown = 4
)

// ErrInvalidPolicy is a host policy file that does not admit.
var ErrInvalidPolicy = fielderr.NewKind("invalid host policy")

// Policy is the host policy file.
type Policy struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"`
	// OnBoot is what `virt host boot` starts: autostart (default) or restore.
	OnBoot string `json:"onBoot,omitempty" yaml:"onBoot,omitempty"`
	// OnShutdown is what `virt host shutdown-guests` does: shutdown
	// (default), save or kill.
	OnShutdown string `json:"onShutdown,omitempty" yaml:"onShutdown,omitempty"`
	// ShutdownTimeout bounds the guests' ACPI power-off (default 300s);
	// those still up then are quit.
	ShutdownTimeout *duration.Duration `json:"shutdownTimeout,omitempty" yaml:"shutdownTimeout,omitempty"`
	// ParallelShutdown is how many guests go down at once, 1 to 256
	// (default 4, when absent; a 0 written out is refused).
	ParallelShutdown int `json:"parallelShutdown,omitempty" yaml:"parallelShutdown,omitempty"`
	// StartDelay is waited between two VM starts at boot, on top of each
	// VM's own delay (default 0).
	StartDelay *duration.Duration `json:"startDelay,omitempty" yaml:"startDelay,omitempty"`
}

// DefaultPolicy is the policy of a host without host.yaml.
func DefaultPolicy() *Policy {
	p := &Policy{APIVersion: PolicyAPIVersion, Kind: PolicyKind}
	p.defaults()
	return p
}

func (p *Policy) defaults() {
	if p.OnBoot == "" {
		p.OnBoot = OnBootAutostart
	}
	if p.OnShutdown == "" {
		p.OnShutdown = OnShutdownShutdown
	}
	if p.ShutdownTimeout == nil {
		d := duration.Duration(DefaultShutdownTimeout)
		p.ShutdownTimeout = &d
	}
	if p.ParallelShutdown == 0 {
		p.ParallelShutdown = DefaultParallelShutdown
	}
	if p.StartDelay == nil {
		d := duration.Duration(0)
		p.StartDelay = &d
	}
}

// Timeout is the shutdown timeout.
func (p *Policy) Timeout() time.Duration { return p.ShutdownTimeout.D() }

// Delay is the delay between VM starts.
func (p *Policy) Delay() time.Duration { return p.StartDelay.D() }

// PolicyFile is host.yaml under layout.
func PolicyFile(layout paths.Layout) string { return filepath.Join(layout.ConfigDir(), policyFile) }

// DecodePolicy reads and admits a host policy: unknown fields and values
// of the wrong type refused by their path, then defaults, then every
// value checked. Errors wrap ErrInvalidPolicy (and fielderr.ErrInvalid).
func DecodePolicy(data []byte) (*Policy, error) {
	doc, err := yamlcheck.Document(data, "file")
	if errors.Is(err, yamlcheck.ErrMoreDocuments) {
		return nil, fmt.Errorf("%w: %v; a host has one policy", ErrInvalidPolicy, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPolicy, err)
	}
	var errs []*fielderr.FieldError
	for _, pr := range yamlcheck.Check(doc, reflect.TypeFor[Policy]()) {
		errs = append(errs, &fielderr.FieldError{Field: pr.Field, Value: pr.Value, Msg: pr.Msg})
	}
	if len(errs) > 0 {
		return nil, fielderr.New(ErrInvalidPolicy, errs...)
	}
	var p Policy
	if err := doc.Decode(&p); err != nil {
		// a duration that does not parse, for one
		return nil, fmt.Errorf("%w: %s", ErrInvalidPolicy, yamlcheck.Message(err))
	}
	if err := p.validate(topLevelKeys(doc)); err != nil {
		return nil, err
	}
	p.defaults()
	return &p, nil
}

// topLevelKeys are the keys the document's top-level mapping sets.
func topLevelKeys(doc *yaml.Node) map[string]bool {
	keys := map[string]bool{}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return keys
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		keys[doc.Content[i].Value] = true
	}
	return keys
}

// validate checks every value; set are the fields the file sets (a
// parallelShutdown of 0 written out is refused: absent is the default,
// and libvirt-guests reads PARALLEL_SHUTDOWN=0 as one at a time).
func (p *Policy) validate(set map[string]bool) error {
	var errs []*fielderr.FieldError
	add := func(field string, v any, msg string) {
		errs = append(errs, &fielderr.FieldError{Field: field, Value: v, Msg: msg})
	}
	if p.APIVersion != PolicyAPIVersion {
		add("apiVersion", p.APIVersion, "want "+PolicyAPIVersion)
	}
	if p.Kind != PolicyKind {
		add("kind", p.Kind, "want "+PolicyKind)
	}
	switch p.OnBoot {
	case "", OnBootAutostart, OnBootRestore:
	default:
		add("onBoot", p.OnBoot, "must be autostart or restore")
	}
	switch p.OnShutdown {
	case "", OnShutdownShutdown, OnShutdownSave, OnShutdownKill:
	default:
		add("onShutdown", p.OnShutdown, "must be shutdown, save or kill")
	}
	if p.ShutdownTimeout != nil && (p.ShutdownTimeout.D() < time.Second || p.ShutdownTimeout.D() > 24*time.Hour) {
		add("shutdownTimeout", p.ShutdownTimeout.String(), "must be between 1s and 24h")
	}
	if p.ParallelShutdown < 0 || p.ParallelShutdown > 256 || (p.ParallelShutdown == 0 && set["parallelShutdown"]) {
		add("parallelShutdown", p.ParallelShutdown, "must be between 1 and 256 (leave it out for the default, 4)")
	}
	if p.StartDelay != nil && p.StartDelay.D() > time.Hour {
		add("startDelay", p.StartDelay.String(), "must be at most 1h")
	}
	if len(errs) > 0 {
		return fielderr.New(ErrInvalidPolicy, errs...)
	}
	return nil
}

// LoadPolicy reads host.yaml under layout; a host without one has the
// defaults. A file that cannot be read or does not admit is an error
// naming it (the caller decides what it still dares to do).
func LoadPolicy(layout paths.Layout) (*Policy, error) {
	path := PolicyFile(layout)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultPolicy(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("host policy: %w", err)
	}
	p, err := DecodePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
