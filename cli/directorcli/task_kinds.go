package directorcli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/taskkind"
	"go.yaml.in/yaml/v3"
)

// maxTaskFile is the largest -f document a task carries (the director's
// own bound on a create-vm or apply-network body).
const maxTaskFile = 1 << 20

// maxTaskDeadline bounds --deadline: a task is kept a week.
const maxTaskDeadline = 7 * 24 * time.Hour

// taskRunOptions are task run's flags. The kind-specific ones are taken
// only by the kinds whose kindSpec lists them.
type taskRunOptions struct {
	Wait     bool
	Deadline time.Duration
	ID       string

	File       string        // -f: create-vm, apply-network
	Timeout    time.Duration // stop-vm
	Force      bool          // stop-vm, delete-vm
	Name       string        // pull-image
	SHA256     string        // pull-image
	Trial      time.Duration // apply-network
	OutFile    string        // -O: collect-diagnostics
	FreshProbe bool          // collect-diagnostics
}

// kindFlags are the kind-specific flags of task run, in help order.
var kindFlags = []string{"file", "timeout", "force", "name", "sha256", "trial", "output-file", "fresh-probe"}

// kindInput is what a kind's build gets: its arguments (after NODE and
// KIND), the flags, and the -f document read.
type kindInput struct {
	args []string
	o    *taskRunOptions
	body []byte
	// timeoutSet: --timeout was given (for stop-vm, 0 is then "at once",
	// not the host's default)
	timeoutSet bool
}

// kindSpec is one task kind as task run takes it: its positional
// arguments, the kind-specific flags it takes (and those it needs), its
// default deadline, and how its Task is made.
type kindSpec struct {
	name     string
	args     []string // names of its positional arguments: NAME, URL
	flags    []string // the kindFlags it takes
	required []string // of flags, those it needs
	short    string
	deadline func(o *taskRunOptions) time.Duration
	build    func(in kindInput) (*directorv1.Task, error)
}

// kindSpecs is every kind, in the order help lists them. Their names are
// the agents' (Register.task_kinds) and the director's (TaskInfo.kind).
var kindSpecs = []kindSpec{
	{name: taskkind.CreateVM, flags: []string{"file"}, required: []string{"file"},
		short:    "create a VM from a virtcon/v1 VirtualMachine manifest (-f FILE, - for stdin)",
		deadline: fixed(30 * time.Minute),
		build: func(in kindInput) (*directorv1.Task, error) {
			// a VM the director creates is at the director's generation 1
			// (the host stamps it as a label and keeps it untouched)
			return &directorv1.Task{Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{Manifest: in.body, DirectorGeneration: "1"}}}, nil
		}},
	{name: taskkind.StartVM, args: []string{"NAME"}, short: "start a VM (its name or UID on the node)", deadline: fixed(5 * time.Minute),
		build: func(in kindInput) (*directorv1.Task, error) {
			return &directorv1.Task{Kind: &directorv1.Task_StartVm{StartVm: &directorv1.StartVM{Vm: in.args[0]}}}, nil
		}},
	{name: taskkind.StopVM, args: []string{"NAME"}, flags: []string{"timeout", "force"},
		short: "stop a VM: the ACPI power button, --timeout for the guest to power off, then (--force) end QEMU; --timeout 0: at once",
		deadline: func(o *taskRunOptions) time.Duration {
			if o.Timeout > 0 {
				return o.Timeout + time.Minute
			}
			return 5 * time.Minute
		},
		build: func(in kindInput) (*directorv1.Task, error) {
			s := &directorv1.StopVM{Vm: in.args[0], TimeoutMs: in.o.Timeout.Milliseconds(), Force: in.o.Force}
			if in.timeoutSet && in.o.Timeout == 0 {
				// no button, no grace (virt vm stop --timeout 0); force
				// too, for an agent older than now (it took force for it)
				s.Now, s.Force = true, true
			}
			return &directorv1.Task{Kind: &directorv1.Task_StopVm{StopVm: s}}, nil
		}},
	{name: taskkind.RebootVM, args: []string{"NAME"}, short: "reboot a running VM", deadline: fixed(5 * time.Minute),
		build: func(in kindInput) (*directorv1.Task, error) {
			return &directorv1.Task{Kind: &directorv1.Task_RebootVm{RebootVm: &directorv1.RebootVM{Vm: in.args[0]}}}, nil
		}},
	{name: taskkind.DeleteVM, args: []string{"NAME"}, flags: []string{"force"}, short: "delete a VM (--force: a running one, stopped first)",
		deadline: fixed(5 * time.Minute),
		build: func(in kindInput) (*directorv1.Task, error) {
			return &directorv1.Task{Kind: &directorv1.Task_DeleteVm{DeleteVm: &directorv1.DeleteVM{Vm: in.args[0], Force: in.o.Force}}}, nil
		}},
	{name: taskkind.PullImage, args: []string{"URL"}, flags: []string{"name", "sha256"}, required: []string{"name"},
		short: "download an image into the node's store as --name (--sha256: the digest it must have)", deadline: fixed(2 * time.Hour),
		build: func(in kindInput) (*directorv1.Task, error) {
			url := in.args[0]
			if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
				return nil, &UsageError{fmt.Errorf("pull-image URL %q: want an http:// or https:// URL", url)}
			}
			sha := strings.ToLower(in.o.SHA256)
			if sha != "" && (len(sha) != 64 || strings.Trim(sha, "0123456789abcdef") != "") {
				return nil, &UsageError{fmt.Errorf("--sha256 %q: want 64 hex digits", in.o.SHA256)}
			}
			return &directorv1.Task{Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: url, Name: in.o.Name, Sha256: sha}}}, nil
		}},
	{name: taskkind.ApplyNetwork, flags: []string{"file", "trial"}, required: []string{"file"},
		short: "apply a virtcon/v1 HostNetwork (-f FILE) as a trial: rolled back unless the node's session comes back within --trial",
		deadline: func(o *taskRunOptions) time.Duration {
			return trialOf(o) + 2*time.Minute
		},
		build: func(in kindInput) (*directorv1.Task, error) {
			return &directorv1.Task{Kind: &directorv1.Task_ApplyNetwork{ApplyNetwork: &directorv1.ApplyNetwork{HostNetwork: in.body,
				TrialMs: in.o.Trial.Milliseconds()}}}, nil
		}},
	{name: taskkind.CollectDiagnostics, flags: []string{"output-file", "fresh-probe"},
		short:    "build the node's redacted diagnostics bundle (with --wait, -O FILE saves it)",
		deadline: fixed(10 * time.Minute),
		build: func(in kindInput) (*directorv1.Task, error) {
			return &directorv1.Task{Kind: &directorv1.Task_CollectDiagnostics{CollectDiagnostics: &directorv1.CollectDiagnostics{FreshProbe: in.o.FreshProbe}}}, nil
		}},
}

// defaultTrial is apply-network's trial when --trial is not given (the
// agent's own default for trial_ms 0).
const defaultTrial = 120 * time.Second

func trialOf(o *taskRunOptions) time.Duration {
	if o.Trial > 0 {
		return o.Trial
	}
	return defaultTrial
}

func fixed(d time.Duration) func(*taskRunOptions) time.Duration {
	return func(*taskRunOptions) time.Duration { return d }
}

// kindNames are the kinds, in help order.
func kindNames() []string {
	names := make([]string, 0, len(kindSpecs))
	for _, k := range kindSpecs {
		names = append(names, k.name)
	}
	return names
}

func findKind(name string) (*kindSpec, error) {
	for i := range kindSpecs {
		if kindSpecs[i].name == name {
			return &kindSpecs[i], nil
		}
	}
	return nil, &UsageError{fmt.Errorf("task kind %q: unknown (want one of %s)", name, strings.Join(kindNames(), ", "))}
}

// kindsTaking names the kinds that take flag.
func kindsTaking(flag string) []string {
	var out []string
	for _, k := range kindSpecs {
		if slices.Contains(k.flags, flag) {
			out = append(out, k.name)
		}
	}
	return out
}

// usage is the kind's synopsis: "stop-vm NAME [--timeout D] [--force]".
func (k *kindSpec) usage() string {
	parts := append([]string{k.name}, k.args...)
	for _, f := range k.flags {
		p := "--" + f
		switch f {
		case "file":
			p = "-f FILE"
		case "output-file":
			p = "-O FILE"
		case "timeout", "trial":
			p += " D"
		case "name":
			p += " N"
		case "sha256":
			p += " H"
		}
		if !slices.Contains(k.required, f) {
			p = "[" + p + "]"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// check refuses a kind-specific flag given to a kind that does not take
// it, a missing one it needs, and the wrong number of arguments. changed
// says whether a flag was given.
func (k *kindSpec) check(args []string, changed func(flag string) bool) error {
	for _, f := range kindFlags {
		if changed(f) && !slices.Contains(k.flags, f) {
			return &UsageError{fmt.Errorf("--%s: %s does not take it (only %s do)", f, k.name, strings.Join(kindsTaking(f), ", "))}
		}
	}
	for _, f := range k.required {
		if !changed(f) {
			return &UsageError{fmt.Errorf("%s needs --%s (usage: task run NODE %s)", k.name, f, k.usage())}
		}
	}
	if len(args) != len(k.args) {
		return &UsageError{fmt.Errorf("%s takes %d argument(s) after the kind, got %d (usage: task run NODE %s)", k.name, len(k.args), len(args), k.usage())}
	}
	for i, a := range args {
		if strings.TrimSpace(a) == "" {
			return &UsageError{fmt.Errorf("%s: empty %s", k.name, k.args[i])}
		}
	}
	return nil
}

// readTaskFile reads -f: a file, or stdin for "-"; at most maxTaskFile
// bytes, a YAML document whose apiVersion and kind are wantKind's.
func readTaskFile(path string, stdin io.Reader, wantKind string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		if stdin == nil {
			stdin = os.Stdin
		}
		b, err = io.ReadAll(io.LimitReader(stdin, maxTaskFile+1))
		path = "stdin"
	} else {
		var f *os.File
		if f, err = os.Open(path); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, maxTaskFile+1))
			f.Close()
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, &UsageError{fmt.Errorf("-f %s: %w", path, err)}
		}
		return nil, fmt.Errorf("-f %s: %w", path, err)
	}
	if len(b) > maxTaskFile {
		return nil, &UsageError{fmt.Errorf("-f %s: larger than %d bytes", path, maxTaskFile)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, &UsageError{fmt.Errorf("-f %s: empty", path)}
	}
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(b, &head); err != nil {
		return nil, &UsageError{fmt.Errorf("-f %s: not a YAML document: %w", path, err)}
	}
	if head.APIVersion != "virtcon/v1" || head.Kind != wantKind {
		return nil, &UsageError{fmt.Errorf("-f %s: apiVersion %q, kind %q: want virtcon/v1 %s", path, head.APIVersion, head.Kind, wantKind)}
	}
	return b, nil
}

// checkOutFile refuses an -O the bundle could not be written to, before
// the task is created: its directory must exist.
func checkOutFile(path string) error {
	if path == "-" || path == "" {
		return &UsageError{errors.New("-O: want a file name (the bundle is binary; the task's state goes to stdout)")}
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return &UsageError{fmt.Errorf("-O %s: %w", path, err)}
	}
	if !st.IsDir() {
		return &UsageError{fmt.Errorf("-O %s: %s is not a directory", path, dir)}
	}
	return nil
}
