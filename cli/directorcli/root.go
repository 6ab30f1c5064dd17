package directorcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/cli/cobrakit"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/internal/output"
)

// DefaultDataDir is where the director keeps its state (the package's
// systemd unit has StateDirectory=virtcon-director).
const DefaultDataDir = "/var/lib/virtcon-director"

// IOStreams are the command's streams: data to Out, status and errors to
// ErrOut.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// System returns the process's own streams.
func System() *IOStreams { return &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

// Env is what every command gets: the global flags resolved, the streams,
// and the seams tests replace.
type Env struct {
	IO      *IOStreams
	Output  string
	DataDir string

	// Now is the clock that "ago" columns count from; nil: time.Now.
	Now func() time.Time
	// Loc is the zone times are printed in; nil: time.Local.
	Loc *time.Location

	// dial opens the admin client on a socket; nil: the director's own.
	dial func(socket string) directorv1connect.AdminServiceClient
	// serve runs a director; nil: runDirector (tests replace it).
	serve func(ctx context.Context, env *Env, o *serveOptions) error
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Env) loc() *time.Location {
	if e.Loc != nil {
		return e.Loc
	}
	return time.Local
}

// Socket is the admin socket of --data.
func (e *Env) Socket() string { return filepath.Join(e.DataDir, director.AdminSocketName) }

// Admin is the admin client on --data's socket.
func (e *Env) Admin() directorv1connect.AdminServiceClient {
	if e.dial != nil {
		return e.dial(e.Socket())
	}
	return director.AdminClient(e.Socket())
}

// Main runs `virt-director` with the process's arguments and returns the
// exit code. The first SIGINT or SIGTERM cancels the command (serve stops
// gracefully); a second one, default again, ends the process.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	return Run(ctx, os.Args[1:], System())
}

// Run executes one command line; tests call it directly.
func Run(ctx context.Context, args []string, io *IOStreams) int {
	return runEnv(ctx, args, &Env{IO: io})
}

func runEnv(ctx context.Context, args []string, env *Env) int {
	root := NewRootCmd(env)
	root.SetArgs(args)
	root.SetIn(env.IO.In)
	root.SetOut(env.IO.Out)
	root.SetErr(env.IO.ErrOut)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(output.TextOnly(env.IO.ErrOut), "virt-director: %s\n", err) // errors quote what nodes say
		var usage *UsageError
		if errors.As(err, &usage) {
			fmt.Fprintln(env.IO.ErrOut, "Run 'virt-director --help' for usage.")
		}
	}
	return ExitCode(err)
}

// NewRootCmd builds the command tree.
func NewRootCmd(env *Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "virt-director",
		Short: "Run the virtcon director and administer its tokens, nodes, tasks and audit log",
		Long: `virt-director runs the director that virtcon hosts enrol with (serve), and
administers a running one over its admin socket, <data>/admin.sock (root only):
join tokens, nodes, tasks on nodes, the nodes' VMs, replicas, the audit log.
Data goes to stdout (-o table|json|yaml), status and errors to stderr. Exit
codes: 0 ok, 1 error (a task run --wait whose task did not succeed included),
2 usage or bad input, 4 not permitted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return validFormat(env.Output)
		},
	}
	fl := root.PersistentFlags()
	fl.StringVarP(&env.Output, "output", "o", output.Table, "output format: table, json or yaml")
	fl.StringVar(&env.DataDir, "data", DefaultDataDir, "`DIR` of the director's state (its admin socket is DIR/admin.sock)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{output.Table, output.JSON, output.YAML}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.MarkPersistentFlagDirname("data")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &UsageError{err} })

	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newServeCmd(env), newTokenCmd(env), newNodeCmd(env), newTaskCmd(env), newVMCmd(env), newReplicaCmd(env), newAuditCmd(env),
		cobrakit.NewVersionCmd("virt-director", func() (io.Writer, string) { return env.IO.Out, env.Output }), cobrakit.NewCompletionCmd("virt-director", usageError), cobrakit.NewGenDocsCmd("docs/virt-director-reference.md"))
	// unknown subcommands and wrong argument counts are usage errors
	cobrakit.WrapArgs(root, usageError)
	return root
}

// usageError is cobrakit's way to make an error a usage error (exit 2).
func usageError(err error) error { return &UsageError{err} }
