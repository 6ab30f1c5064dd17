package status

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/vm"
)

// bootLine is what the last `virt host boot` did, in one line: "09:12:
// network applied (4 steps), 3 of 4 VMs started, 1 failed: db-01: ...".
func (m *Model) bootLine() string {
	s := m.c.Styles
	switch {
	case !m.netLoaded:
		return m.loading()
	case m.bootErr != nil:
		return s.Badgef(styles.Unknown) + " boot record unreadable: " + m.clean(m.bootErr.Error())
	case m.boot == nil:
		return s.Muted.Render("not recorded: virt host boot has not run on this host")
	}
	r := m.boot
	if !m.bootThis {
		return s.Badgef(styles.Warning) + " virt host boot has not run since the host booted (last: " +
			r.Time.In(m.c.Now().Location()).Format("2006-01-02 15:04") + ")"
	}
	t := r.Tally()
	level := styles.OK
	var parts []string
	switch r.Network.Result {
	case host.NetApplied:
		parts = append(parts, fmt.Sprintf("network applied (%s)", plural(len(r.Network.Steps), "step")))
	case host.NetUnchanged:
		parts = append(parts, "network up")
	case host.NetNone:
		parts = append(parts, "no network configured")
	case host.NetOnTrial:
		parts = append(parts, "network left to the change on trial")
	case host.NetFailed:
		level = styles.Failure
		parts = append(parts, "NETWORK FAILED: "+r.Network.Error)
	}
	switch {
	case r.PolicyError != "":
		level = styles.Failure
		parts = append(parts, "no VM started: host.yaml refused: "+r.PolicyError)
	case r.VMsError != "":
		level = styles.Failure
		parts = append(parts, r.VMsError)
	case t.Wanted == 0:
		parts = append(parts, "no autostart VMs")
	default:
		vms := fmt.Sprintf("%d of %d VMs started", t.Started, t.Wanted-t.AlreadyRunning)
		if t.AlreadyRunning > 0 {
			vms += fmt.Sprintf(" (%d running already)", t.AlreadyRunning)
		}
		parts = append(parts, vms)
		if t.NotStarted > 0 {
			if level == styles.OK {
				level = styles.Warning
			}
			parts = append(parts, fmt.Sprintf("%d not started", t.NotStarted))
		}
		if t.Failed > 0 {
			// last: its error is what the width cuts
			level = styles.Failure
			parts = append(parts, fmt.Sprintf("%d failed: %s: %s", t.Failed, t.FirstFailed.Name, t.FirstFailed.Error))
		}
	}
	// in the zone of the screen's clock (the header's)
	line := m.clean(r.Time.In(m.c.Now().Location()).Format("15:04") + ": " + strings.Join(parts, ", "))
	if level != styles.OK {
		line = s.Badgef(level) + " " + line
	}
	return line
}

// phaseOrder puts the phases an operator acts on first.
var phaseOrder = []string{vm.PhaseRunning, vm.PhasePaused, vm.PhaseShuttingDown, vm.PhaseUnresponsive, vm.PhaseError, vm.PhaseStopped}

func (m *Model) vmLine() string {
	s := m.c.Styles
	switch {
	case !m.vmsLoaded:
		return m.loading()
	case m.vmErr != nil && m.vms == nil:
		return s.Badgef(styles.Unknown) + " unavailable: " + m.clean(m.vmErr.Error())
	case len(m.vms) == 0:
		return "none defined"
	}
	byPhase := map[string]int{}
	unreadable := 0
	for _, e := range m.vms {
		if e.Class == vm.ClassUnreadable {
			// its phase is unknown: told apart, first, not counted as one
			unreadable++
			continue
		}
		p := e.Phase
		if p == "" {
			p = strings.ToLower(e.Class)
		}
		byPhase[p]++
	}
	var parts []string
	for _, p := range phaseOrder {
		if n := byPhase[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ToLower(p)))
			delete(byPhase, p)
		}
	}
	rest := make([]string, 0, len(byPhase))
	for p := range byPhase {
		rest = append(rest, p)
	}
	sort.Strings(rest)
	for _, p := range rest {
		parts = append(parts, fmt.Sprintf("%d %s", byPhase[p], strings.ToLower(p)))
	}
	total := fmt.Sprintf("(%d total)", len(m.vms))
	line := total
	if len(parts) > 0 {
		line = strings.Join(parts, ", ") + " " + total
	}
	switch {
	case unreadable > 0:
		// first, so that a narrow screen cuts the counts, not the problem
		sep := "; "
		if len(parts) == 0 {
			sep = " "
		}
		line = plural(unreadable, "VM") + " unreadable (see VMs)" + sep + line
	case m.vmErr != nil:
		line += "; list incomplete: " + m.clean(m.vmErr.Error())
	}
	switch {
	case unreadable > 0:
		line = s.Badgef(styles.Failure) + " " + line
	case m.vmErr != nil || m.countPhases(vm.PhaseError, vm.PhaseUnresponsive) > 0:
		line = s.Badgef(styles.Warning) + " " + line
	}
	return line
}

func (m *Model) countPhases(phases ...string) int {
	n := 0
	for _, e := range m.vms {
		for _, p := range phases {
			if e.Phase == p {
				n++
			}
		}
	}
	return n
}

func (m *Model) tryLine(now time.Time) string {
	s := m.c.Styles
	switch {
	case !m.netLoaded:
		return m.loading()
	case m.pending == nil && m.resolved != nil:
		return s.Badgef(styles.Warning) + " expired change on trial rolled back at " + m.resolved.At.Local().Format(time.TimeOnly) +
			": " + m.clean(m.resolved.Why)
	case m.pending == nil:
		return "no change on trial"
	case m.pending.RollbackError != "":
		// nothing here retries it (each refresh would redo the restore);
		// the advice before the error, which the line's width may cut
		return s.Badgef(styles.Failure) + " rollback failed, retry: virt net rollback: " + m.clean(m.pending.RollbackError)
	}
	left := m.pending.Remaining(now).Round(time.Second)
	if left == 0 {
		return s.Badgef(styles.Warning) + " change on trial: deadline passed, rolling back"
	}
	return s.Badgef(styles.Warning) + fmt.Sprintf(" change on trial: rollback in %d:%02d; keep: virt net confirm",
		int(left.Minutes()), int(left.Seconds())%60)
}
