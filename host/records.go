package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
)

// The records of the host's lifecycle, in <state>/ (/var/lib/virtcon/):
// what the last `virt host boot` did (boot.json) and what the last `virt
// host shutdown-guests` found running (shutdown.json). Both are written
// atomically, 0600, by the one command that owns each; everything else
// only reads them.
const (
	bootRecordFile     = "boot.json"
	shutdownRecordFile = "shutdown.json"
)

// BootRecordFile is boot.json under layout.
func BootRecordFile(layout paths.Layout) string {
	return filepath.Join(layout.StateDir(), bootRecordFile)
}

// ShutdownRecordFile is shutdown.json under layout.
func ShutdownRecordFile(layout paths.Layout) string {
	return filepath.Join(layout.StateDir(), shutdownRecordFile)
}

// shuttingDownFile, in the runtime directory (/run/virtcon/), says that a
// `virt host shutdown-guests` began in this boot: the host is going down,
// and `virt host boot` starts no more VMs. It names its boot, so that one
// left by an earlier boot (a runtime directory that outlived a reboot) is
// told apart; a new boot clears it (/run is emptied, and the boot removes
// one of another boot).
const shuttingDownFile = "shutting-down.json"

// ShuttingDownFile is the "shutting down" marker under layout.
func ShuttingDownFile(layout paths.Layout) string {
	return filepath.Join(layout.RunDir(), shuttingDownFile)
}

// ShuttingDown is the marker a shutdown sets before it stops anything.
type ShuttingDown struct {
	// Time is when the shutdown began; BootID the boot it ran in.
	Time   time.Time `json:"time"`
	BootID string    `json:"bootId"`
	PID    int       `json:"pid"`
}

// ErrHostShuttingDown: a shutdown began in this boot (ShuttingDownFile).
var ErrHostShuttingDown = errors.New("the host is shutting down")

// markShuttingDown sets the marker, for this boot.
func markShuttingDown(layout paths.Layout, at time.Time) error {
	return writeRecord(ShuttingDownFile(layout), &ShuttingDown{Time: at.UTC(), BootID: proc.BootID(), PID: os.Getpid()})
}

// shuttingDown is nil unless a shutdown began in this boot: then an error
// wrapping ErrHostShuttingDown says when. A marker of another boot is
// removed (a new boot clears it); one that cannot be read counts as set
// (fail closed: the host may be going down), naming the file.
func shuttingDown(layout paths.Layout) error {
	var m ShuttingDown
	ok, err := readRecord(ShuttingDownFile(layout), &m)
	switch {
	case err != nil:
		return fmt.Errorf("%w: its marker cannot be read (remove it if the host is not): %w", ErrHostShuttingDown, err)
	case !ok:
		return nil
	case m.BootID != proc.BootID():
		if err := os.Remove(ShuttingDownFile(layout)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: the marker of an earlier boot cannot be removed: %w", ErrHostShuttingDown, err)
		}
		return nil
	}
	return fmt.Errorf("%w: virt host shutdown-guests began at %s", ErrHostShuttingDown, m.Time.Local().Format(time.DateTime))
}

// ShutdownRecord is what `virt host shutdown-guests` writes before it
// stops anything: the VMs that run, which the next boot starts again with
// `onBoot: restore`, or whatever onBoot says when OnShutdown is save
// (their state waits on disk).
type ShutdownRecord struct {
	// Time is when the shutdown began.
	Time time.Time `json:"time"`
	// BootID is the boot it ran in.
	BootID string `json:"bootId,omitempty"`
	// OnShutdown is what it did to the guests: shutdown, save or kill.
	OnShutdown string `json:"onShutdown,omitempty"`
	// Running are the UIDs of the VMs that ran when it began.
	Running []string `json:"running"`
}

// LoadShutdownRecord reads shutdown.json; nil, nil when there is none. A
// record that cannot be read or decoded is an error naming it: a boot
// restores nothing from it.
func LoadShutdownRecord(layout paths.Layout) (*ShutdownRecord, error) {
	var r ShutdownRecord
	ok, err := readRecord(ShutdownRecordFile(layout), &r)
	if !ok {
		return nil, err
	}
	return &r, nil
}

// WriteShutdownRecord replaces shutdown.json, atomically and durably.
func WriteShutdownRecord(layout paths.Layout, r *ShutdownRecord) error {
	return writeRecord(ShutdownRecordFile(layout), r)
}

// Outcomes of a VM in a boot (BootVM.Outcome).
const (
	// BootStarted: the boot started it.
	BootStarted = "started"
	// BootAlreadyRunning: it ran already, and was left alone.
	BootAlreadyRunning = "running"
	// BootFailed: its start failed (Error says why); the boot went on.
	BootFailed = "failed"
	// BootNotStarted: it was not started (Note says why): the boot was
	// cancelled before its turn, or the VM, read again right before its
	// start, no longer qualified (deleted, autostart turned off, started
	// and stopped by hand since the boot began).
	BootNotStarted = "not-started"
	// BootMarkedStopped: its spec said running, its QEMU did not survive
	// the host's reboot, and the policy does not start it: the boot
	// recorded it as stopped (it is no longer MISSING).
	BootMarkedStopped = "marked-stopped"
)

// Why a boot starts a VM (BootVM.Why).
const (
	// WhyAutostart: spec.autostart.
	WhyAutostart = "autostart"
	// WhyRestore: it ran at the last clean shutdown (onBoot: restore).
	WhyRestore = "restore"
	// WhySaved: its state is saved (phase Saved, spec.running: a
	// shutdown with onShutdown: save, or `virt vm save`), or the last
	// shutdown saved the guests; the start resumes it, whatever onBoot
	// says.
	WhySaved = "saved"
)

// Network results of a boot (BootNetwork.Result).
const (
	// NetApplied: the applied configuration was applied again and steps
	// ran (the host had lost some of it).
	NetApplied = "applied"
	// NetUnchanged: the host had its network; no step ran.
	NetUnchanged = "unchanged"
	// NetNone: nothing was ever applied on this host; nothing to do.
	NetNone = "none"
	// NetOnTrial: a change made in this boot is on trial, its watchdog
	// alive: the network is left to it.
	NetOnTrial = "on-trial"
	// NetFailed: the network could not be brought up (Error says why).
	NetFailed = "failed"
)

// BootRecord is what `virt host boot` did, written at its end.
type BootRecord struct {
	// Time is when it began, Finished when it ended.
	Time     time.Time `json:"time"`
	Finished time.Time `json:"finished"`
	// BootID is the boot it ran in (/proc/sys/kernel/random/boot_id).
	BootID string `json:"bootId"`
	// FirstOfBoot: no boot record of this boot existed before this one
	// (a later run of `virt host boot` in the same boot is not first).
	// A previous record that cannot be read makes the run a later one.
	FirstOfBoot bool `json:"firstOfBoot"`
	// PreviousError: the previous boot record could not be read. The run
	// then counts as a later run of this boot: it acts on no shutdown
	// record and marks no VM stopped (fail closed).
	PreviousError string `json:"previousError,omitempty"`
	// Policy is the host policy in effect; nil when host.yaml did not
	// load, and then PolicyError says why and no VM was started.
	Policy      *Policy `json:"policy"`
	PolicyError string  `json:"policyError,omitempty"`
	// Network is what became of the host network.
	Network BootNetwork `json:"network"`
	// VMs are the VMs the boot was to start, in the order it took them,
	// then those it marked stopped.
	VMs []BootVM `json:"vms"`
	// VMsError is why no VM was looked at: the VM store could not be
	// listed, or the policy did not load.
	VMsError string `json:"vmsError,omitempty"`
	// Skipped are VMs the boot did not dare to consider: ours, but their
	// spec cannot be read (so whether they autostart is unknown).
	Skipped []BootSkipped `json:"skipped,omitempty"`
	// Shutdown is the shutdown record the boot found, if any.
	Shutdown *BootShutdown `json:"shutdownRecord,omitempty"`
	// ShutdownActedOn is the time of the last shutdown record a boot
	// used (restored or resumed its VMs from), carried over by every boot
	// after it: each record is acted on once, so a record that an
	// unclean shutdown left standing restores nothing at the next boot.
	ShutdownActedOn *time.Time `json:"shutdownActedOn,omitempty"`
}

// BootNetwork is the network part of a boot.
type BootNetwork struct {
	Result string `json:"result"`
	// Steps are the steps that ran (Reapply).
	Steps []string `json:"steps"`
	// RolledBack is the try, pending when the host went down, that the
	// boot rolled back first.
	RolledBack *netcfg.ResolvedTry `json:"rolledBack,omitempty"`
	// Note says more where the result needs it (a try on trial).
	Note  string            `json:"note,omitempty"`
	Error string            `json:"error,omitempty"`
	Took  duration.Duration `json:"took"`
}

// BootVM is one VM of a boot.
type BootVM struct {
	Name  string            `json:"name"`
	UID   string            `json:"uid"`
	Why   string            `json:"why,omitempty"`
	Order int               `json:"order"`
	Delay duration.Duration `json:"delay"`
	// Outcome is one of the Boot* outcomes.
	Outcome string `json:"outcome"`
	// StartedAt is when its start began (after its delay); Took is how
	// long the start took (until QMP answered, or it failed).
	StartedAt *time.Time        `json:"startedAt,omitempty"`
	Took      duration.Duration `json:"took"`
	Error     string            `json:"error,omitempty"`
	// Note says why it was not started (not-started), or what made a VM
	// of the plan run already.
	Note string `json:"note,omitempty"`
}

// BootSkipped is a VM the boot left alone without looking at its spec.
type BootSkipped struct {
	UID string `json:"uid"`
	Why string `json:"why"`
}

// BootShutdown is the shutdown record a boot found and what it made of it.
type BootShutdown struct {
	// Time is the record's (when that shutdown began).
	Time time.Time `json:"time"`
	// Running is how many VMs it lists.
	Running int `json:"running"`
	// Used: the boot started its VMs (onBoot: restore, or a shutdown
	// that saved them). A record is
	// acted on once (ShutdownActedOn): a boot that finds one an earlier
	// boot acted on (the last shutdown was not clean) uses it no more.
	Used bool `json:"used"`
	// Note says why it was not used: acted on before, stale (a VM was
	// started after it), or onBoot.
	Note string `json:"note,omitempty"`
	// Error is why it could not be read (nothing was restored from it).
	Error string `json:"error,omitempty"`
}

// BootTally counts a boot's VMs, for the one-line summaries the faces
// word (the DCUI's status screen, `virt host status`).
type BootTally struct {
	// Wanted is how many VMs the boot was to start (autostart, restore).
	Wanted         int
	Started        int
	AlreadyRunning int
	Failed         int
	NotStarted     int
	MarkedStopped  int
	// FirstFailed is the first VM that failed, nil when none did.
	FirstFailed *BootVM
}

// Tally counts the record's VMs by outcome.
func (r *BootRecord) Tally() BootTally {
	var t BootTally
	for i := range r.VMs {
		v := &r.VMs[i]
		if v.Why != "" {
			t.Wanted++
		}
		switch v.Outcome {
		case BootStarted:
			t.Started++
		case BootAlreadyRunning:
			t.AlreadyRunning++
		case BootFailed:
			t.Failed++
			if t.FirstFailed == nil {
				t.FirstFailed = v
			}
		case BootNotStarted:
			t.NotStarted++
		case BootMarkedStopped:
			t.MarkedStopped++
		}
	}
	return t
}

// OfThisBoot reports whether the record was written in the boot the host
// is in now (false also when the boot ID cannot be read): a record of an
// earlier boot means `virt host boot` has not run since the host booted.
func (r *BootRecord) OfThisBoot() bool {
	id := proc.BootID()
	return id != "" && id == r.BootID
}

// LoadBootRecord reads boot.json; nil, nil when `virt host boot` never ran.
func LoadBootRecord(layout paths.Layout) (*BootRecord, error) {
	var r BootRecord
	ok, err := readRecord(BootRecordFile(layout), &r)
	if !ok {
		return nil, err
	}
	return &r, nil
}

func writeBootRecord(layout paths.Layout, r *BootRecord) error {
	return writeRecord(BootRecordFile(layout), r)
}

// readRecord decodes the JSON file at path into v; false, nil when the
// file does not exist.
func readRecord(path string, v any) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s is damaged: %w", path, err)
	}
	return true, nil
}

func writeRecord(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}
