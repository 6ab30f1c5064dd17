package qmp

import (
	"context"
	"errors"
	"strings"

	gqmp "github.com/digitalocean/go-qemu/qmp"
)

// StatusInfo is the reply to query-status.
type StatusInfo struct {
	Running bool `json:"running"`
	// Status is QEMU's run state: "prelaunch", "running", "paused",
	// "shutdown", "inmigrate", "internal-error", "guest-panicked", ...
	Status     string `json:"status"`
	Singlestep bool   `json:"singlestep"`
}

// Status runs query-status.
func (m *Monitor) Status(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := m.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// SystemPowerdown asks the guest to power off (ACPI power button); the
// guest may ignore it.
func (m *Monitor) SystemPowerdown(ctx context.Context) error {
	return m.Execute(ctx, "system_powerdown", nil, nil)
}

// SystemReset resets the machine, like pressing its reset button.
func (m *Monitor) SystemReset(ctx context.Context) error {
	return m.Execute(ctx, "system_reset", nil, nil)
}

// Stop pauses all vCPUs.
func (m *Monitor) Stop(ctx context.Context) error {
	return m.Execute(ctx, "stop", nil, nil)
}

// Cont resumes the vCPUs (also leaves "prelaunch" for QEMU started with -S).
func (m *Monitor) Cont(ctx context.Context) error {
	return m.Execute(ctx, "cont", nil, nil)
}

// SystemWakeup wakes a guest suspended to RAM (run state "suspended").
func (m *Monitor) SystemWakeup(ctx context.Context) error {
	return m.Execute(ctx, "system_wakeup", nil, nil)
}

// Quit makes QEMU exit without asking the guest, then closes the Monitor.
// QEMU may close the socket before its reply arrives; once the command was
// sent, that counts as success.
func (m *Monitor) Quit(ctx context.Context) error {
	_, sent, err := m.exec(ctx, "quit", nil)
	if err != nil && sent && errors.Is(err, ErrClosed) {
		err = nil
	}
	m.Close()
	return err
}

// QueryKVM runs query-kvm: whether KVM is in use (enabled) and whether
// this QEMU supports it (present).
func (m *Monitor) QueryKVM(ctx context.Context) (enabled, present bool, err error) {
	var r struct {
		Enabled bool `json:"enabled"`
		Present bool `json:"present"`
	}
	err = m.Execute(ctx, "query-kvm", nil, &r)
	return r.Enabled, r.Present, err
}

// CPUInfo is one vCPU as reported by query-cpus-fast.
type CPUInfo struct {
	CPUIndex int    `json:"cpu-index"`
	QOMPath  string `json:"qom-path"`
	ThreadID int    `json:"thread-id"` // host thread running this vCPU
	Target   string `json:"target"`    // e.g. "x86_64"
}

// QueryCPUsFast runs query-cpus-fast (query-cpus, which go-qemu's raw
// package still uses, was removed in QEMU 6.0).
func (m *Monitor) QueryCPUsFast(ctx context.Context) ([]CPUInfo, error) {
	var cpus []CPUInfo
	err := m.Execute(ctx, "query-cpus-fast", nil, &cpus)
	return cpus, err
}

// Version runs query-version.
func (m *Monitor) Version(ctx context.Context) (gqmp.Version, error) {
	var v gqmp.Version
	err := m.Execute(ctx, "query-version", nil, &v)
	return v, err
}

// MachineType returns the machine type QEMU runs, resolved from the alias
// it may have been started with (-machine q35 runs pc-q35-7.2 on QEMU
// 7.2): QOM's type of /machine, without its "-machine" suffix.
func (m *Monitor) MachineType(ctx context.Context) (string, error) {
	var t string
	if err := m.Execute(ctx, "qom-get", map[string]string{"path": "/machine", "property": "type"}, &t); err != nil {
		return "", err
	}
	return strings.TrimSuffix(t, "-machine"), nil
}

// MachineInfo is one machine type of query-machines.
type MachineInfo struct {
	Name  string `json:"name"`            // e.g. pc-q35-7.2
	Alias string `json:"alias,omitempty"` // e.g. q35
}

// QueryMachines lists the machine types this QEMU has.
func (m *Monitor) QueryMachines(ctx context.Context) ([]MachineInfo, error) {
	var ms []MachineInfo
	err := m.Execute(ctx, "query-machines", nil, &ms)
	return ms, err
}
