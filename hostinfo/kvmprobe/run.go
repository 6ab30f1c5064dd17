package kvmprobe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/virtcon/virtcon/internal/reexec"
)

const (
	// ChildEnv tells the child process the device to probe.
	ChildEnv = "VIRTCON_KVM_PROBE_CHILD"
	// budgetEnv tells the child how long it may keep a vCPU in KVM_RUN
	// before kicking it out itself and reporting how far the guest got.
	budgetEnv = "VIRTCON_KVM_PROBE_BUDGET"

	// DefaultDevice and DefaultTimeout are the Options defaults.
	DefaultDevice  = "/dev/kvm"
	DefaultTimeout = 3 * time.Second

	// progressPrefix starts the child's progress lines on stderr; each one
	// carries the partial Result as JSON.
	progressPrefix = "kvmprobe-progress "

	maxStdout = 1 << 20 // a Result is a few hundred bytes
	// reapGrace bounds the wait for a SIGKILLed child to be reaped; a
	// child stuck in an uninterruptible kernel sleep cannot die sooner.
	reapGrace = time.Second
	// pipeGrace bounds reading what is left in the pipes once the child is gone.
	pipeGrace = 500 * time.Millisecond
	// exitGrace is how long a child that has delivered its result may
	// take to exit before it is killed.
	exitGrace = 100 * time.Millisecond
)

// Options configure Run. The zero value probes /dev/kvm with a 3s deadline.
type Options struct {
	Device string // default DefaultDevice
	// Timeout is the hard deadline for the child; default DefaultTimeout.
	// The child stops its own guest code at 60% of it or after its run
	// budget (about 0.4s, enough for a loop at MinItersPerSec), whichever
	// comes first, so a Timeout of 1s or more always yields a measured speed.
	Timeout time.Duration
	Exe     string       // program to re-execute; default os.Executable()
	Logger  *slog.Logger // default: discard
}

// childMode is the probe's child mode (see internal/reexec).
const childMode = "kvm-probe"

func init() { reexec.Register(childMode, runChild) }

// runChild is the probe's child (the program's main calls reexec.Init
// first thing): it runs the probe in this process on the device that
// VIRTCON_KVM_PROBE_CHILD names and prints the JSON Result on stdout.
func runChild() int {
	device := os.Getenv(ChildEnv)
	budget, err := time.ParseDuration(os.Getenv(budgetEnv))
	if err != nil || budget <= 0 {
		budget = DefaultTimeout * 6 / 10
	}
	start := time.Now()
	r := runProbe(device, budget, emitProgress)
	r.ElapsedNanos = time.Since(start).Nanoseconds()
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "kvmprobe: writing result:", err)
		return 1
	}
	// EOF on stdout tells the parent the result is complete.
	_ = os.Stdout.Close()
	return 0
}

// emitProgress writes one progress line for the parent to follow.
func emitProgress(r Result) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	_, _ = os.Stderr.Write(append(append([]byte(progressPrefix), b...), '\n'))
}

// Run executes the probe in a child process under a hard deadline and
// returns what it found. It re-executes opts.Exe (default: this program) in
// its child mode with VIRTCON_KVM_PROBE_CHILD=<device> and reads the child's JSON Result. When the
// deadline passes or ctx is cancelled it SIGKILLs the child's whole process
// group and returns TimedOut=true with the last stage the child reported.
// Run never blocks much beyond the deadline and reaps the child.
func Run(ctx context.Context, opts Options) Result {
	start := time.Now()
	if opts.Device == "" {
		opts.Device = DefaultDevice
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fail := func(format string, args ...any) Result {
		return Result{Device: opts.Device, Error: fmt.Sprintf(format, args...), ElapsedNanos: time.Since(start).Nanoseconds()}
	}
	if err := ctx.Err(); err != nil {
		return fail("kvm probe not started: %v", err)
	}
	exe := opts.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fail("kvm probe: finding own executable: %v", err)
		}
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return fail("kvm probe: pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return fail("kvm probe: pipe: %v", err)
	}
	// the deadline and ctx are watched below: they kill the whole group
	cmd := reexec.Command(context.Background(), exe, childMode, childEnviron(opts.Device, opts.Timeout*6/10))
	cmd.Stdout = outW
	cmd.Stderr = errW
	setProcessGroup(cmd)
	log.Debug("starting kvm probe child", "exe", exe, "device", opts.Device, "timeout", opts.Timeout)
	err = cmd.Start()
	closeAll(outW, errW) // the child has its own copies
	if err != nil {
		closeAll(outR, errR)
		return fail("kvm probe: starting child %s: %v", exe, err)
	}

	// stdout: the final Result
	outDone := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(outR, maxStdout))
		_, _ = io.Copy(io.Discard, outR)
		outDone <- b
	}()
	// stderr: progress lines, anything else kept as a short tail
	var (
		mu       sync.Mutex
		progress = Result{Device: opts.Device}
		tail     []string
	)
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		sc := bufio.NewScanner(errR)
		sc.Buffer(make([]byte, 0, 4096), 64<<10)
		for sc.Scan() {
			line := sc.Text()
			if payload, ok := strings.CutPrefix(line, progressPrefix); ok {
				var p Result
				if json.Unmarshal([]byte(payload), &p) == nil {
					mu.Lock()
					progress = p
					mu.Unlock()
					log.Debug("kvm probe progress", "stage", p.Stage)
					continue
				}
			}
			log.Debug("kvm probe child stderr", "line", line)
			mu.Lock()
			if tail = append(tail, line); len(tail) > 5 {
				tail = tail[1:]
			}
			mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, errR)
	}()

	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()

	timer := time.NewTimer(opts.Timeout)
	defer timer.Stop()
	var (
		waitErr error
		exited  bool
		out     []byte
		haveOut bool
		result  Result
		valid   bool             // the child printed a complete Result
		graceC  <-chan time.Time // runs from the moment the result is in
		why     string           // why the child was killed before it printed a result
	)
wait:
	for !exited {
		select {
		case waitErr = <-waitDone:
			exited = true
		case out = <-outDone:
			// The child closes stdout once the result is written; what
			// remains is its exit, which must not hold us up (race-enabled
			// binaries, for one, sleep a second on exit).
			haveOut, outDone = true, nil
			if result, valid = parseResult(out); valid {
				graceC = time.After(exitGrace)
			}
		case <-graceC:
			log.Debug("kvm probe child slow to exit after its result; killing it", "pid", cmd.Process.Pid)
			break wait
		case <-timer.C:
			why = fmt.Sprintf("timed out after %v", opts.Timeout)
			break wait
		case <-ctx.Done():
			why = fmt.Sprintf("cancelled (%v)", ctx.Err())
			break wait
		}
	}
	if !exited {
		killProcessGroup(cmd)
		select {
		case waitErr = <-waitDone:
		case <-time.After(reapGrace):
			// The wait goroutine still reaps it once the kernel lets go.
			log.Warn("kvm probe child not yet dead after SIGKILL", "pid", cmd.Process.Pid)
		}
	}

	// Whatever is still in the pipes is readable now; don't wait on
	// anything that inherited them and is still alive.
	_ = outR.SetReadDeadline(time.Now().Add(pipeGrace))
	_ = errR.SetReadDeadline(time.Now().Add(pipeGrace))
	if !haveOut {
		out = <-outDone
		result, valid = parseResult(out)
	}
	<-errDone
	closeAll(outR, errR)

	mu.Lock()
	last, tailText := progress, strings.Join(tail, " | ")
	mu.Unlock()
	elapsed := time.Since(start).Nanoseconds()

	switch {
	case valid:
		result.ElapsedNanos = elapsed
		log.Debug("kvm probe finished", "stage", result.Stage, "itersPerSec", result.ItersPerSec, "error", result.Error)
		return result
	case why != "":
		r := last
		r.Device = opts.Device
		r.TimedOut = true
		r.ElapsedNanos = elapsed
		r.Error = fmt.Sprintf("kvm probe %s in stage %q; child killed", why, r.Stage)
		log.Warn("kvm probe child killed", "reason", why, "stage", r.Stage)
		return r
	}
	r := last
	r.Device = opts.Device
	r.ElapsedNanos = elapsed
	r.Error = fmt.Sprintf("kvm probe child gave no result (%s)", exitText(waitErr))
	if tailText != "" {
		r.Error += ": " + tailText
	}
	log.Debug("kvm probe child failed", "stage", r.Stage, "error", r.Error)
	return r
}

// parseResult decodes the child's stdout; valid means a complete Result.
func parseResult(out []byte) (Result, bool) {
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil || r.Stage == "" {
		return Result{}, false
	}
	return r, true
}

// childEnviron is our environment with the child markers set.
func childEnviron(device string, budget time.Duration) []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, ChildEnv+"=") || strings.HasPrefix(kv, budgetEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, ChildEnv+"="+device, budgetEnv+"="+budget.String())
}

func exitText(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	}
	return err.Error()
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
