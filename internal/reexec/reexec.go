package reexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Env names the environment variable that selects the child mode: set
// (by Command) in a child, absent in a program started normally.
const Env = "VIRTCON_REEXEC"

var (
	mu     sync.Mutex
	modes  = map[string]func() int{}
	inited bool // Init ran: this program dispatches its child modes
)

// Register records the child mode name: in a process started by Command
// for name, Init runs fn instead of main and exits with what it returns.
// It is meant for init(); an empty name, one with characters beyond
// [a-z0-9-], or one registered twice is a programming error and panics.
func Register(name string, fn func() int) {
	if !validName(name) {
		panic(fmt.Sprintf("reexec: invalid child mode name %q (want [a-z0-9-]+)", name))
	}
	if fn == nil {
		panic(fmt.Sprintf("reexec: child mode %q: nil function", name))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := modes[name]; dup {
		panic(fmt.Sprintf("reexec: child mode %q registered twice", name))
	}
	modes[name] = fn
}

func validName(name string) bool {
	return name != "" && strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}) < 0
}

// Init must be called first thing in main (and in TestMain): when this
// process was started by Command it runs that child mode and exits;
// otherwise it returns at once. A mode this program does not know ends
// the process with exit status 2 and a line on stderr: whatever started
// it wanted a child, never this program's main.
func Init() {
	mu.Lock()
	inited = true
	mu.Unlock()
	name := os.Getenv(Env)
	if name == "" {
		return // unset, or set empty: a normal start
	}
	os.Exit(run(name))
}

// run runs the mode name and returns its exit status.
func run(name string) int {
	mu.Lock()
	fn := modes[name]
	mu.Unlock()
	if fn == nil {
		fmt.Fprintf(os.Stderr, "%s: %s=%q: no such child mode in this program (it has: %s)\n",
			progName(), Env, name, strings.Join(Modes(), ", "))
		return 2
	}
	// What the mode starts in turn is not this mode's child, unless it
	// says so through Command.
	_ = os.Unsetenv(Env)
	return fn()
}

// Modes lists the registered child modes, sorted.
func Modes() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(modes))
	for n := range modes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Command returns the command that runs the program exe (normally this
// one, os.Executable()) in the child mode name, with no arguments, under
// ctx as exec.CommandContext does (context.Background() for a child that
// must outlive its caller). Its environment is env (nil: this process's)
// with any inherited mode marker replaced by name's. The caller sets
// stdin, stdout, stderr, extra files and process attributes, and starts
// it. Starting a mode this program never registered fails.
func Command(ctx context.Context, exe, name string, env []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, exe)
	if env == nil {
		env = os.Environ()
	}
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, Env+"=") })
	cmd.Env = append(env, Env+"="+name)
	mu.Lock()
	_, known := modes[name]
	dispatches := inited
	mu.Unlock()
	switch {
	case !known:
		cmd.Err = fmt.Errorf("reexec: no child mode %q registered in this program", name)
	case !dispatches && sameProgram(exe):
		// the child would run this program's main (a test binary: its
		// whole test suite) instead of the mode
		cmd.Err = fmt.Errorf("reexec: child mode %q: this program never called reexec.Init, so its child would not run the mode", name)
	}
	return cmd
}

// sameProgram reports whether exe is this process's own executable.
func sameProgram(exe string) bool {
	self, err := os.Executable()
	if err != nil {
		return false
	}
	a, errA := os.Stat(self)
	b, errB := os.Stat(exe)
	return errA == nil && errB == nil && os.SameFile(a, b)
}

func progName() string {
	if len(os.Args) > 0 && os.Args[0] != "" {
		return os.Args[0]
	}
	return "virtcon"
}
