package agent

import (
	"context"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/vm"
)

// reporter makes the HostReports of one Run: the CPU use is the share
// since its previous sample.
type reporter struct {
	view *hostView
	prev *hostinfo.Usage
}

// checkRank orders check statuses from best to worst.
var checkRank = map[hostinfo.Status]int{hostinfo.Pass: 0, hostinfo.Unknown: 1, hostinfo.Warn: 2, hostinfo.Fail: 3}

// report reads the host: CPU and memory, the VMs (as `virt vm list`
// classifies them; only read), the acceleration verdict and the worst
// check. What cannot be read is left zero and logged at debug.
func (r *reporter) report(ctx context.Context) *directorv1.HostReport {
	h := r.view.h
	rep := &directorv1.HostReport{VmCounts: &directorv1.VMCounts{}}
	if u, err := h.Info.Usage(); err == nil {
		if r.prev != nil {
			rep.CpuPercent = u.CPUPercentSince(*r.prev)
		}
		r.prev = &u
		rep.MemTotalBytes, rep.MemAvailableBytes = u.MemTotalBytes, u.MemAvailableBytes
	} else {
		h.Log.Debug("host report: usage", "err", err)
	}
	entries, err := h.VMs.List(ctx)
	if err != nil {
		// a partial list (an unreadable spec is a row of its own) still counts
		h.Log.Debug("host report: vm list", "err", err)
	}
	for _, e := range entries {
		countVM(rep.VmCounts, e)
		rep.Vms = append(rep.Vms, &directorv1.VMSummary{Uid: e.UID, Name: e.Name, Phase: e.Phase, Class: e.Class})
	}
	rep.Acceleration, rep.AccelerationReason = h.Info.Acceleration(ctx)
	if _, chk, err := r.view.checks(ctx); err == nil {
		rep.WorstCheck = worstCheck(chk.Checks)
	}
	return rep
}

func countVM(c *directorv1.VMCounts, e vm.Entry) {
	switch {
	case e.Class == vm.ClassExternal:
		c.External++
	case e.Class == vm.ClassOrphaned:
		c.Orphaned++
	case e.Class != vm.ClassManaged:
		c.Other++ // MISSING, UNREADABLE
	case e.Phase == vm.PhaseRunning:
		c.Running++
	case e.Phase == vm.PhasePaused:
		c.Paused++
	case e.Phase == vm.PhaseStopped || e.Phase == vm.PhaseSaved:
		c.Stopped++
	default:
		c.Other++
	}
}

// worstCheck is the first of the worst checks (FAIL > WARN > UNKNOWN >
// PASS), nil without checks.
func worstCheck(checks []hostinfo.Check) *directorv1.CheckSummary {
	var w *hostinfo.Check
	for i := range checks {
		if w == nil || checkRank[checks[i].Status] > checkRank[w.Status] {
			w = &checks[i]
		}
	}
	if w == nil {
		return nil
	}
	return &directorv1.CheckSummary{Id: w.ID, Status: string(w.Status), Detail: w.Detail}
}
