package vm

import (
	"encoding/json"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
)

// Entry is one line of `virt vm list`. A zero number or an empty string
// is a value nobody knows (an EXTERNAL guest's generation, a stopped VM's
// pid): JSON and YAML write it as null, never as a made-up zero.
type Entry struct {
	Name               string
	UID                string
	Class              string
	Phase              string
	Accel              string
	AccelReason        string
	PID                int
	CPUs               int
	MemoryMiB          int
	Generation         int64
	ObservedGeneration int64
	// DirectorGeneration is the LabelDirectorGeneration label's value:
	// the director's generation of a VM it created, opaque here.
	DirectorGeneration string
	Source             string // external: qemu or libvirt
	Path               string // orphans: the leftover file or directory
	Reason             string // why it is in its class or phase, when a face words it (Reason*)
	Message            string
	// Autostart and the startup order and delay are the spec's
	// (spec.autostart, spec.startup): what `virt host boot` does with the
	// VM. They have defaults, never unknown: false, 0 and 0s for a VM
	// without them and for guests that are not ours.
	Autostart    bool
	StartupOrder int
	StartupDelay time.Duration
	// StartedAt is when virtcon last started (or resumed) the VM, from
	// status.startedAt, which a stop keeps; zero when it never started or
	// is not ours. `virt host boot` tells a stale shutdown record by it.
	// Not in the listing's JSON (`virt vm show` has status.startedAt).
	StartedAt time.Time
	// SpecRunning is spec.running, what the operator last asked: a Saved
	// VM with it is resumed by `virt host boot`, one stopped since (`virt
	// vm stop` of a Saved VM keeps its state) is not. Not in the JSON.
	SpecRunning bool
}

// entryWire is Entry as JSON and YAML carry it (docs/cli.md).
type entryWire struct {
	Name               *string `json:"name" yaml:"name"`
	UID                *string `json:"uid" yaml:"uid"`
	Class              string  `json:"class" yaml:"class"`
	Phase              string  `json:"phase" yaml:"phase"`
	Accel              *string `json:"accel" yaml:"accel"`
	AccelReason        string  `json:"accelReason,omitempty" yaml:"accelReason,omitempty"`
	PID                *int    `json:"pid" yaml:"pid"`
	CPUs               *int    `json:"cpus" yaml:"cpus"`
	MemoryMiB          *int    `json:"memoryMiB" yaml:"memoryMiB"`
	Generation         *int64  `json:"generation" yaml:"generation"`
	ObservedGeneration *int64  `json:"observedGeneration" yaml:"observedGeneration"`
	DirectorGeneration *string `json:"directorGeneration" yaml:"directorGeneration"`
	Source             string  `json:"source,omitempty" yaml:"source,omitempty"`
	Path               string  `json:"path,omitempty" yaml:"path,omitempty"`
	Reason             string  `json:"reason,omitempty" yaml:"reason,omitempty"`
	Message            string  `json:"message,omitempty" yaml:"message,omitempty"`
	// never null: defaults
	Autostart    bool              `json:"autostart" yaml:"autostart"`
	StartupOrder int               `json:"startupOrder" yaml:"startupOrder"`
	StartupDelay duration.Duration `json:"startupDelay" yaml:"startupDelay"`
}

func known[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func orZero[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (e Entry) wire() entryWire {
	return entryWire{
		Name: known(e.Name), UID: known(e.UID), Class: e.Class, Phase: e.Phase,
		Accel: known(e.Accel), AccelReason: e.AccelReason,
		PID: known(e.PID), CPUs: known(e.CPUs), MemoryMiB: known(e.MemoryMiB),
		Generation: known(e.Generation), ObservedGeneration: known(e.ObservedGeneration),
		DirectorGeneration: known(e.DirectorGeneration), Source: e.Source, Path: e.Path, Reason: e.Reason, Message: e.Message,
		Autostart: e.Autostart, StartupOrder: e.StartupOrder, StartupDelay: duration.Duration(e.StartupDelay),
	}
}

// MarshalJSON writes unknown values as null.
func (e Entry) MarshalJSON() ([]byte, error) { return json.Marshal(e.wire()) }

// MarshalYAML writes unknown values as null.
func (e Entry) MarshalYAML() (any, error) { return e.wire(), nil }

// UnmarshalJSON reads what MarshalJSON writes (null is the zero value).
func (e *Entry) UnmarshalJSON(b []byte) error {
	var w entryWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Entry{
		Name: orZero(w.Name), UID: orZero(w.UID), Class: w.Class, Phase: w.Phase,
		Accel: orZero(w.Accel), AccelReason: w.AccelReason,
		PID: orZero(w.PID), CPUs: orZero(w.CPUs), MemoryMiB: orZero(w.MemoryMiB),
		Generation: orZero(w.Generation), ObservedGeneration: orZero(w.ObservedGeneration),
		DirectorGeneration: orZero(w.DirectorGeneration), Source: w.Source, Path: w.Path, Reason: w.Reason, Message: w.Message,
		Autostart: w.Autostart, StartupOrder: w.StartupOrder, StartupDelay: w.StartupDelay.D(),
	}
	return nil
}

// Actionable reports whether virtcon acts on the entry: its own VMs only
// (MANAGED, or MISSING: ours, its process gone). EXTERNAL and ORPHANED
// rows are listed read-only, UNREADABLE ones until their spec is repaired.
func (e Entry) Actionable() bool { return e.Class == ClassManaged || e.Class == ClassMissing }

// Running reports whether a QEMU process exists for the entry.
func (e Entry) Running() bool {
	if e.PID > 0 {
		return true
	}
	switch e.Phase {
	case PhaseRunning, PhasePaused, PhaseShuttingDown, PhaseUnresponsive:
		return e.Class == ClassManaged
	}
	return false
}
