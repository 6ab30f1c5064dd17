package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/vm"
)

// call is one call the fake VM service received: the method and its
// arguments after the context.
type call struct {
	Method string
	Args   []any
}

func (c call) String() string {
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = fmt.Sprintf("%#v", a)
	}
	return c.Method + "(" + strings.Join(args, ", ") + ")"
}

// fakeVMs is a vmService that records every call and answers from a
// script: errs[method] is what that method returns (before anything
// else); otherwise a reference is looked up in entries by name or UID, as
// the manager does, and a lifecycle call changes the entry as the real
// one would (a start makes it Running), so the commands' second look
// (Peek) sees it.
type fakeVMs struct {
	entries []vm.Entry
	errs    map[string]error
	save    *vm.SaveResult // what a Save without an error returns
	stop    vm.StopResult  // what a PowerOff without an error returns

	calls []call
	// saveLeft is how long Save's context had left when it was called;
	// -1 when it had no deadline.
	saveLeft time.Duration
}

var _ vmService = (*fakeVMs)(nil)

// webUID is the UID of the fake's VM "web".
const webUID = "3f1c9a52-7d4e-4b8a-9c61-0e2f5a7b8d90"

// newFakeVMs is a fake with one stopped VM "web" (startup order 2, delay
// 10s) and an external guest "ext".
func newFakeVMs() *fakeVMs {
	return &fakeVMs{
		entries: []vm.Entry{
			{Name: "web", UID: webUID, Class: vm.ClassManaged, Phase: vm.PhaseStopped, CPUs: 1, MemoryMiB: 256, StartupOrder: 2, StartupDelay: 10 * time.Second},
			{Name: "ext", Class: vm.ClassExternal, Phase: vm.PhaseRunning, PID: 777, Source: "qemu"},
		},
		errs: map[string]error{},
		stop: vm.StopResult{How: vm.StoppedACPI, Took: 1234 * time.Millisecond},
	}
}

// record notes the call and returns its scripted error.
func (f *fakeVMs) record(method string, args ...any) error {
	f.calls = append(f.calls, call{Method: method, Args: args})
	return f.errs[method]
}

// lookup resolves ref as the manager does: by UID or name, case-blind.
func (f *fakeVMs) lookup(ref string) (*vm.Entry, error) {
	for i, e := range f.entries {
		if strings.EqualFold(e.UID, ref) || strings.EqualFold(e.Name, ref) {
			return &f.entries[i], nil
		}
	}
	return nil, errNotFound(ref)
}

// act is a lifecycle call on ref: its scripted error, or the lookup's,
// or change applied to the entry.
func (f *fakeVMs) act(method, ref string, change func(*vm.Entry), more ...any) error {
	if err := f.record(method, append([]any{ref}, more...)...); err != nil {
		return err
	}
	e, err := f.lookup(ref)
	if err != nil {
		return err
	}
	if change != nil {
		change(e)
	}
	return nil
}

func running(e *vm.Entry) { e.Phase, e.PID, e.Accel = vm.PhaseRunning, 4242, "tcg" }
func stopped(e *vm.Entry) { e.Phase, e.PID = vm.PhaseStopped, 0 }

func (f *fakeVMs) StartWith(_ context.Context, ref string, opts vm.StartOptions) error {
	return f.act("StartWith", ref, running, opts)
}

func (f *fakeVMs) PowerOff(_ context.Context, ref string, opts vm.StopOptions) (vm.StopResult, error) {
	if err := f.act("PowerOff", ref, stopped, opts); err != nil {
		return vm.StopResult{How: vm.StoppedNotRunning}, err
	}
	return f.stop, nil
}

func (f *fakeVMs) Kill(_ context.Context, ref string) error { return f.act("Kill", ref, stopped) }
func (f *fakeVMs) Reboot(_ context.Context, ref string) error {
	return f.act("Reboot", ref, nil)
}
func (f *fakeVMs) Pause(_ context.Context, ref string) error {
	return f.act("Pause", ref, func(e *vm.Entry) { e.Phase = vm.PhasePaused })
}
func (f *fakeVMs) Resume(_ context.Context, ref string) error {
	return f.act("Resume", ref, func(e *vm.Entry) { e.Phase = vm.PhaseRunning })
}

func (f *fakeVMs) Delete(_ context.Context, ref string, force bool) error {
	return f.act("Delete", ref, nil, force)
}

func (f *fakeVMs) SaveWith(ctx context.Context, ref string, _ vm.SaveOptions) (*vm.SaveResult, error) {
	f.saveLeft = -1
	if d, ok := ctx.Deadline(); ok {
		f.saveLeft = time.Until(d)
	}
	if err := f.act("Save", ref, func(e *vm.Entry) { e.Phase, e.PID = vm.PhaseSaved, 0 }); err != nil {
		return nil, err
	}
	return f.save, nil
}

func (f *fakeVMs) SetAutostart(_ context.Context, ref string, on bool, order int, delay time.Duration) error {
	return f.act("SetAutostart", ref, func(e *vm.Entry) {
		e.Autostart, e.StartupOrder, e.StartupDelay = on, order, delay
	}, on, order, delay)
}

func (f *fakeVMs) Peek(_ context.Context, ref string) (*vm.Entry, error) {
	if err := f.record("Peek", ref); err != nil {
		return nil, err
	}
	e, err := f.lookup(ref)
	if err != nil {
		return nil, err
	}
	c := *e
	return &c, nil
}

func (f *fakeVMs) List(context.Context) ([]vm.Entry, error) {
	if err := f.record("List"); err != nil {
		return nil, err
	}
	return append([]vm.Entry(nil), f.entries...), nil
}

// The commands below are not driven through the fake yet: they record
// the call and fail, so a test that reaches one says so.

func (f *fakeVMs) unscripted(method string, args ...any) error {
	if err := f.record(method, args...); err != nil {
		return err
	}
	return fmt.Errorf("fake VM service: %s is not scripted", method)
}

func (f *fakeVMs) Create(_ context.Context, v *vm.VirtualMachine) (*vm.VirtualMachine, error) {
	return nil, f.unscripted("Create", v)
}
func (f *fakeVMs) Apply(_ context.Context, in *vm.VirtualMachine) (*vm.ApplyResult, error) {
	return nil, f.unscripted("Apply", in)
}
func (f *fakeVMs) Get(_ context.Context, ref string) (*vm.VirtualMachine, *vm.Entry, error) {
	return nil, nil, f.unscripted("Get", ref)
}
func (f *fakeVMs) NICs(_ context.Context, v *vm.VirtualMachine) []vm.NICStatus {
	_ = f.unscripted("NICs", v)
	return nil
}
func (f *fakeVMs) GC(_ context.Context, dryRun bool) ([]vm.Orphan, error) {
	return nil, f.unscripted("GC", dryRun)
}
func (f *fakeVMs) Console(_ context.Context, ref string, _ io.Reader, _ io.Writer, _ func(*vm.VirtualMachine)) error {
	return f.unscripted("Console", ref)
}
func (f *fakeVMs) Logs(_ context.Context, ref string, _ io.Writer, follow bool) error {
	return f.unscripted("Logs", ref, follow)
}
func (f *fakeVMs) IP(_ context.Context, ref string) ([]vm.Address, error) {
	return nil, f.unscripted("IP", ref)
}
func (f *fakeVMs) EnsureImage(_ context.Context, ref string, _ vm.ProgressFunc) (string, *vm.Image, error) {
	return "", nil, f.unscripted("EnsureImage", ref)
}
func (f *fakeVMs) PullImage(_ context.Context, url, name, wantSHA string, _ vm.ProgressFunc) (*vm.Image, error) {
	return nil, f.unscripted("PullImage", url, name, wantSHA)
}
func (f *fakeVMs) ImportImage(_ context.Context, file, name string) (*vm.Image, error) {
	return nil, f.unscripted("ImportImage", file, name)
}
func (f *fakeVMs) ListImages(context.Context) ([]vm.Image, error) {
	return nil, f.unscripted("ListImages")
}
func (f *fakeVMs) RemoveImage(_ context.Context, name string) error {
	return f.unscripted("RemoveImage", name)
}

// The core's errors as the manager returns them (vm/store.go,
// vm/lifecycle.go, vm/manager.go).

func errNotFound(ref string) error { return fmt.Errorf("vm %q: %w", ref, vm.ErrNotFound) }

func errAmbiguous(ref string) error {
	return fmt.Errorf("vm %q: %w: 2 VMs have this name (a, b); use the UID of the one you mean", ref, vm.ErrAmbiguous)
}

func errNotRunning(name, op string) error {
	return fmt.Errorf("vm %q: %s: %w", name, op, vm.ErrNotRunning)
}

// errUnreadableSpec is a spec that exists and cannot be read (not root).
func errUnreadableSpec(uid string) error {
	p := "/var/lib/virtcon/vms/" + uid + "/vm.yaml"
	return &vm.SpecError{UID: uid, Path: p, Err: &fs.PathError{Op: "open", Path: p, Err: syscall.EACCES}}
}

func errField(field string, value any, msg string) error {
	return fielderr.New(vm.ErrInvalid, &vm.FieldError{Field: field, Value: value, Msg: msg})
}

// runFake runs virt with f behind the VM commands, through the path
// main takes (Run's wording of errors and ExitCode), and returns stdout,
// stderr and the exit code. The host's services must never be built: a
// command that did would have bypassed the seam.
func runFake(t *testing.T, f *fakeVMs, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, vmSvc: f}
	code := runEnv(context.Background(), append([]string{"--root", t.TempDir()}, args...), env)
	if env.host != nil {
		t.Errorf("virt %s built the host's services: it went around the VM service", strings.Join(args, " "))
	}
	return out.String(), errOut.String(), code
}
