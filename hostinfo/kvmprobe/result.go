package kvmprobe

import (
	"fmt"
	"time"
)

// Stage names, in the order the probe goes through them. Result.Stage is
// the last stage the probe entered: when the probe fails or hangs, it names
// the step that failed or hung; "done" means every step succeeded.
const (
	StageOpen       = "open"        // opening the device node
	StageAPIVersion = "api-version" // KVM_GET_API_VERSION, KVM_CHECK_EXTENSION, KVM_GET_VCPU_MMAP_SIZE
	StageCreateVM   = "create-vm"   // KVM_CREATE_VM (and KVM_SET_TSS_ADDR)
	StageMemory     = "memory"      // guest memory: mmap + KVM_SET_USER_MEMORY_REGION
	StageCreateVCPU = "create-vcpu" // KVM_CREATE_VCPU, kvm_run mmap, initial registers
	StageRunIO      = "run-io"      // first KVM_RUN: expect the OUT of the first program
	StageRunHLT     = "run-hlt"     // re-entry: expect the HLT of the first program
	StageLoop       = "loop"        // the timed loop program
	StageDone       = "done"        // everything passed (speed is judged by Verdict)
)

// MinItersPerSec is the slowest timed-loop speed that still counts as
// hardware-like.
//
// The guest loop is `dec ecx; jnz` (macro-fused, one loop-carried 1-cycle
// dependency), so a CPU executing it natively does about one iteration per
// clock: 1e9 to 5e9 iterations/s on anything from a slow server core to a
// fast desktop, including properly nested VMX/SVM guests, since the loop
// causes no VM exits. An implementation that emulates guest instructions or
// traps them ~1000x too slowly (the failure this probe exists to catch)
// manages 1e6 to 5e6. 1e8 sits 10x-50x below native and 20x-100x above that
// slow path, so neither a busy host nor a fast emulator lands on the wrong
// side of it.
const MinItersPerSec = 1e8

// Result is what one probe found. It is JSON-serialisable; the child process
// prints it on stdout.
type Result struct {
	Device         string          `json:"device"`
	APIVersion     int             `json:"apiVersion"`           // KVM_GET_API_VERSION, 0 if not reached
	Extensions     map[string]bool `json:"extensions,omitempty"` // key KVM_CAP_* by name
	MaxVCPUs       int             `json:"maxVCPUs,omitempty"`   // KVM_CAP_MAX_VCPUS (else NR_VCPUS, else 4)
	Stage          string          `json:"stage"`                // last stage entered, see Stage*
	IOExitOK       bool            `json:"ioExitOK"`             // the guest's OUT reached us with the expected port, size and value
	HaltOK         bool            `json:"haltOK"`               // followed by KVM_EXIT_HLT
	LoopIterations uint64          `json:"loopIterations"`       // timed-loop iterations the guest completed
	LoopNanos      int64           `json:"loopNanos"`            // host monotonic time spent in KVM_RUN for the timed loop
	ItersPerSec    float64         `json:"itersPerSec"`          // LoopIterations / LoopNanos
	ElapsedNanos   int64           `json:"elapsedNanos"`         // whole probe, child process start to finish
	TimedOut       bool            `json:"timedOut"`             // the child was killed at the deadline (or on cancellation)
	Error          string          `json:"error,omitempty"`      // what failed and where
}

// Verdict says whether the probe proved that KVM runs guest code correctly
// and at hardware-like speed (at least MinItersPerSec), with a one-line reason.
func (r Result) Verdict() (ok bool, reason string) {
	elapsed := time.Duration(r.ElapsedNanos).Round(time.Millisecond)
	switch {
	case r.TimedOut:
		return false, fmt.Sprintf("KVM probe timed out after %v in stage %q: the guest hung or ran far too slowly", elapsed, r.Stage)
	case r.Error != "" && r.Stage == StageLoop && r.LoopNanos > 0 && r.ItersPerSec < MinItersPerSec:
		// the child stopped a loop that was running too slowly to finish
		return false, fmt.Sprintf("KVM runs guest code at %s, far below the hardware-like minimum of %s (nested, paravirtual or emulated KVM): %s",
			rate(r.ItersPerSec), rate(MinItersPerSec), r.Error)
	case r.Error != "":
		return false, fmt.Sprintf("KVM probe failed in stage %q: %s", r.Stage, r.Error)
	case !r.IOExitOK:
		return false, "KVM probe: the guest never produced the expected I/O exit"
	case !r.HaltOK:
		return false, "KVM probe: the guest's HLT never reached the host"
	case r.Stage != StageDone || r.LoopIterations == 0 || r.LoopNanos <= 0:
		return false, fmt.Sprintf("KVM probe: the timed loop did not complete (stage %q)", r.Stage)
	case r.ItersPerSec < MinItersPerSec:
		return false, fmt.Sprintf("KVM runs guest code at %s, below the hardware-like minimum of %s (nested, paravirtual or emulated KVM)",
			rate(r.ItersPerSec), rate(MinItersPerSec))
	}
	return true, fmt.Sprintf("KVM runs guest code at %s (minimum %s)", rate(r.ItersPerSec), rate(MinItersPerSec))
}

// rate formats an iterations-per-second figure for humans.
func rate(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fG iter/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM iter/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk iter/s", v/1e3)
	}
	return fmt.Sprintf("%.0f iter/s", v)
}
