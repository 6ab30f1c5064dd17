package host

import (
	"errors"
	"io/fs"
	"os"
)

// Status is the host's lifecycle as `virt host status` shows it: the
// policy in effect (or why host.yaml does not load), what the last boot
// did and what the last shutdown found running. Each part that cannot be
// read says so in its error and leaves the others.
type Status struct {
	PolicyFile string `json:"policyFile"`
	// PolicyFromFile: host.yaml exists (else the defaults are in effect).
	PolicyFromFile bool `json:"policyFromFile"`
	// Policy is in effect: the file's, or the defaults without one; nil
	// when the file does not load (PolicyError), and then `virt host
	// boot` starts no VM.
	Policy      *Policy `json:"policy"`
	PolicyError string  `json:"policyError,omitempty"`
	// Boot is the last boot's record, nil when `virt host boot` never
	// ran; BootOfThisBoot says whether it ran since the host booted.
	Boot           *BootRecord `json:"boot"`
	BootOfThisBoot bool        `json:"bootOfThisBoot"`
	BootError      string      `json:"bootError,omitempty"`
	// Shutdown is the last shutdown record, nil when there is none.
	Shutdown      *ShutdownRecord `json:"shutdown"`
	ShutdownError string          `json:"shutdownError,omitempty"`
}

// Status reads the host's lifecycle records and its policy.
func (h *Host) Status() *Status {
	st := &Status{PolicyFile: PolicyFile(h.Layout)}
	if _, err := os.Stat(st.PolicyFile); !errors.Is(err, fs.ErrNotExist) {
		st.PolicyFromFile = true // an unreadable one is refused below
	}
	if p, err := LoadPolicy(h.Layout); err != nil {
		st.PolicyError = err.Error()
	} else {
		st.Policy = p
	}
	if b, err := LoadBootRecord(h.Layout); err != nil {
		st.BootError = err.Error()
	} else if b != nil {
		st.Boot, st.BootOfThisBoot = b, b.OfThisBoot()
	}
	if s, err := LoadShutdownRecord(h.Layout); err != nil {
		st.ShutdownError = err.Error()
	} else {
		st.Shutdown = s
	}
	return st
}

// LastBoot is the last boot's record (nil when `virt host boot` never
// ran) and whether it ran in the boot the host is in now.
func (h *Host) LastBoot() (rec *BootRecord, thisBoot bool, err error) {
	rec, err = LoadBootRecord(h.Layout)
	if rec != nil {
		thisBoot = rec.OfThisBoot()
	}
	return rec, thisBoot, err
}
