package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/virtcon/virtcon/cli/cobrakit"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/paths"
)

// Env is what every command gets: the global flags resolved, the streams,
// and the logger. Commands build the core objects they need from it.
type Env struct {
	IO       *IOStreams
	Output   string
	Root     string
	HostRoot string
	LogLevel string
	NoColor  bool
	Logger   *slog.Logger

	host  *host.Host // built on first use, after the flags are read
	vmSvc vmService  // tests' fake VM service; nil: the host's VM manager
}

// Layout is virtcon's own file layout under --root.
func (e *Env) Layout() paths.Layout { return paths.New(e.Root) }

// Host is the core's services for --root and --host-root, built once.
func (e *Env) Host() *host.Host {
	if e.host == nil {
		e.host = host.New(host.Options{Layout: e.Layout(), HostRoot: e.HostRoot, Logger: e.Logger})
	}
	return e.host
}

// Main runs `virt` with the process's arguments and returns the exit code.
// main calls reexec.Init before it: virt's child modes never get here.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, os.Args[1:], System())
}

// Run executes one command line; tests call it directly.
func Run(ctx context.Context, args []string, io *IOStreams) int {
	return runEnv(ctx, args, &Env{IO: io})
}

// runEnv is Run with the Env given: tests set its unexported services.
func runEnv(ctx context.Context, args []string, env *Env) int {
	io := env.IO
	if code, refused := refuseJoinArgs(args, io); refused {
		return code
	}
	root := NewRootCmd(env)
	root.SetArgs(args)
	root.SetIn(io.In)
	root.SetOut(io.Out)
	root.SetErr(io.ErrOut)
	err := wordError(root.ExecuteContext(ctx))
	if err != nil && !errors.Is(err, ErrCheckFailed) {
		msg := err.Error()
		if errors.Is(err, fs.ErrPermission) && !strings.Contains(msg, "needs root") {
			msg += " (needs root: run it with sudo)"
		}
		fmt.Fprintf(textOnly{io.ErrOut}, "virt: %s\n", msg) // errors quote host-provided names
		var usage *UsageError
		if errors.As(err, &usage) {
			fmt.Fprintln(io.ErrOut, "Run 'virt --help' for usage.")
		}
	}
	return ExitCode(err)
}

// NewRootCmd builds the command tree.
func NewRootCmd(env *Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "virt",
		Short: "Run a KVM host: inspect it, run VMs, configure its network",
		Long: `virt drives one KVM host from a shell: host inspection and checks, VMs as
plain QEMU processes, and host networking. Data goes to stdout (-o table|json|yaml),
progress and warnings to stderr. Exit codes: 0 ok, 1 error, 2 usage, 3 check failed,
4 not permitted, 5 director credential revoked or expired (enrol again).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return env.setup(cmd)
		},
	}
	fl := root.PersistentFlags()
	fl.StringVarP(&env.Output, "output", "o", FormatTable, "output format: table, json or yaml (wide: the table with more columns, virt vm list)")
	fl.StringVar(&env.Root, "root", "", "relocate virtcon's config, state, runtime and log directories under `DIR` (env VIRTCON_ROOT)")
	fl.StringVar(&env.HostRoot, "host-root", "", "read the host's /proc, /sys and /dev under `DIR` (env VIRTCON_HOST_ROOT)")
	fl.StringVar(&env.LogLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	fl.BoolVar(&env.NoColor, "no-color", false, "never use colour (also NO_COLOR)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{FormatTable, FormatWide, FormatJSON, FormatYAML}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &UsageError{err} })

	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(cobrakit.NewVersionCmd("virt", func() (io.Writer, string) { return env.IO.Out, env.Output }), newHostCmd(env), newDiagnosticsCmd(env), cobrakit.NewCompletionCmd("virt", usageError), cobrakit.NewGenDocsCmd("docs/cli-reference.md"),
		newApplyCmd(env), newVMCmd(env), newImageCmd(env), newNetCmd(env), newDCUICmd(env), newWebtermCmd(env), newAgentCmd(env))
	// unknown subcommands and wrong argument counts are usage errors
	cobrakit.WrapArgs(root, usageError)
	return root
}

func (e *Env) setup(cmd *cobra.Command) error {
	if !cmd.Flags().Changed("root") {
		e.Root = os.Getenv(paths.EnvRoot)
	}
	if !cmd.Flags().Changed("host-root") {
		e.HostRoot = os.Getenv("VIRTCON_HOST_ROOT")
	}
	if e.HostRoot == "" {
		e.HostRoot = "/"
	}
	if err := validFormat(e.Output); err != nil {
		return err
	}
	if e.Output == FormatWide && cmd.Annotations[annotationWide] == "" {
		return &UsageError{fmt.Errorf("--output wide: %s has no wide table (want table, json or yaml; virt vm list has one)", cmd.CommandPath())}
	}
	if _, ok := os.LookupEnv("NO_COLOR"); ok || e.NoColor || os.Getenv("TERM") == "dumb" {
		e.IO.Color = false
	}
	var lvl slog.Level
	switch strings.ToLower(e.LogLevel) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn", "warning":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return &UsageError{fmt.Errorf("--log-level: unknown level %q (want debug, info, warn or error)", e.LogLevel)}
	}
	e.Logger = slog.New(slog.NewTextHandler(e.IO.ErrOut, &slog.HandlerOptions{Level: lvl}))
	return nil
}

// usageError is cobrakit's way to make an error a usage error (exit 2).
func usageError(err error) error { return &UsageError{err} }
