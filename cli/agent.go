package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
)

// Seams for tests: the CLI's part (where the join string comes from,
// what happens to the join file, the words and exit codes) is tested
// without a director; agent's tests enrol against a real one.
var (
	agentEnroll = agent.Enroll
	agentRun    = agent.Run
	agentLeave  = agent.Leave
)

// maxJoinLen bounds what is read as a join string (one is ~130 bytes).
const maxJoinLen = 4096

// errJoinOnArgv refuses a join string or token on the command line
// without repeating it: what is there is already in the process list and
// maybe the shell's history, and must not reach a terminal log as well.
var errJoinOnArgv = errors.New("the join string is never taken from the command line, where the process list and the shell history keep it: " +
	"pass it in a file (--join-file FILE, deleted after enrolment) or on stdin (virt agent enroll < FILE); " +
	"if that was a real token, revoke it (virt-director token revoke ID) and make a new one")

// refuseJoinArgs refuses any command line with a join string in it (an
// argument, or a flag's value, holding "vcj1:"), before cobra could
// repeat it in an error.
func refuseJoinArgs(args []string, streams *IOStreams) (int, bool) {
	for _, a := range args {
		if strings.Contains(a, enroll.JoinPrefix) {
			err := &UsageError{errJoinOnArgv}
			fmt.Fprintf(streams.ErrOut, "virt: %s\n", err)
			return ExitCode(err), true
		}
	}
	return 0, false
}

func newAgentCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Enrol this host into a director and keep its session (the node agent)",
		Long: `The node agent: it enrols the host into a director with a one-time join string
(virt-director token create), then keeps one mTLS session with it (virt agent
run, the unit virtcon-agent.service): registration with the host's facts and
capabilities, heartbeats, host reports, certificate renewal. It never starts,
stops or changes a VM and runs no command for the director: a director that is
down, an agent that crashed or a credential that was revoked leaves every VM as
it is. Exit code 5: the credential was revoked or expired; enrol again.`,
	}
	cmd.AddCommand(newAgentEnrollCmd(env), newAgentRunCmd(env), newAgentStatusCmd(env), newAgentLeaveCmd(env), newAgentConfigCheckCmd(env))
	return cmd
}

type agentEnrollOptions struct {
	joinFile    string
	unsafeNoPin bool
	token       string
}

func newAgentEnrollCmd(env *Env) *cobra.Command {
	o := &agentEnrollOptions{}
	cmd := &cobra.Command{
		Use:   "enroll",
		Short: "Enrol this host into a director with a join string read from a file or stdin",
		Long: `Enrol this host into a director: the join string (vcj1:ID.SECRET@HOST:PORT#sha256:PIN,
printed once by virt-director token create) is read from --join-file FILE or,
without it, from stdin (hidden when stdin is a terminal) — never from the command
line, which the process list and the shell history would keep.

The director's CA is checked against the pin in the TLS handshake before the
token is sent; a join string without a pin is refused unless
--unsafe-skip-ca-pin (then whoever answers at the address is trusted). The host
makes its own P-256 key (it never leaves /etc/virtcon/agent, 0600), sends a
certificate request with its UUID, hostname, version and capabilities, and
stores the certificate, the director's CA and agent.yaml. A retry after a lost
reply reuses the key and gets the same certificate. The join file is deleted
after a successful enrolment.

Then start the agent: systemctl enable --now virtcon-agent.service (or virt
agent run). A host that is enrolled must leave first (virt agent leave); one
whose credential was revoked or expired enrols again directly.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &UsageError{fmt.Errorf("%s takes no arguments: %w", cmd.CommandPath(), errJoinOnArgv)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("token") {
				return &UsageError{fmt.Errorf("--token: %w", errJoinOnArgv)}
			}
			return runAgentEnroll(cmd.Context(), env, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.joinFile, "join-file", "", "read the join string from `FILE` (deleted after enrolment); default: stdin")
	fl.BoolVar(&o.unsafeNoPin, "unsafe-skip-ca-pin", false, "enrol with a join string that has no #sha256: pin, trusting whatever answers at its address (open to a man in the middle)")
	fl.StringVar(&o.token, "token", "", "refused: the join string is never taken from the command line")
	_ = fl.MarkHidden("token")
	cmd.SetFlagErrorFunc(scrubbedFlagError)
	return cmd
}

// scrubbedFlagError words a flag error of enroll without any value from
// the command line: a mistyped flag may carry the secret.
func scrubbedFlagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	var vr *pflag.ValueRequiredError
	var iv *pflag.InvalidValueError
	switch {
	case errors.As(err, &ne) && ne.GetSpecifiedShortnames() != "":
		return &UsageError{fmt.Errorf("unknown shorthand flag -%c (what follows it is not repeated here)", ne.GetSpecifiedName()[0])}
	case errors.As(err, &ne):
		return &UsageError{fmt.Errorf("unknown flag --%s (a value given with it is not repeated here)", ne.GetSpecifiedName())}
	case errors.As(err, &vr):
		return &UsageError{err} // names the flag only
	case errors.As(err, &iv):
		return &UsageError{fmt.Errorf("--%s: bad value (not repeated here)", iv.GetFlag().Name)}
	}
	return &UsageError{errors.New("bad flag (not repeated here)")}
}

func runAgentEnroll(ctx context.Context, env *Env, o *agentEnrollOptions) error {
	text, err := readJoin(env.IO, o.joinFile)
	if err != nil {
		return err
	}
	join, err := enroll.ParseJoin(text)
	if err != nil {
		// a JoinError never contains the secret
		return &UsageError{err}
	}
	if join.Pin() == "" && !o.unsafeNoPin {
		return &UsageError{fmt.Errorf("join string for %s: %w: virt-director token create prints one with #sha256:…; "+
			"--unsafe-skip-ca-pin enrols without checking the director (only on a network you trust)", join.Addr(), enroll.ErrNoPin)}
	}
	fmt.Fprintf(textOnly{env.IO.ErrOut}, "virt agent: enrolling with %s (token %s)…\n", join.Addr(), join.ID())
	st, err := agentEnroll(ctx, env.Host(), join, agent.EnrollOptions{UnsafeSkipPin: o.unsafeNoPin, Logger: env.Logger})
	if err != nil {
		return agentWords(err)
	}
	if o.joinFile != "" {
		if err := os.Remove(o.joinFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(textOnly{env.IO.ErrOut}, "virt agent: warning: join file not deleted: %v (its token is used up, but delete it)\n", err)
		}
	}
	if err := render(env.IO.Out, env.Output, st, func(w io.Writer) error { return writeAgentStatus(w, st, time.Now()) }); err != nil {
		return err
	}
	fmt.Fprintln(env.IO.ErrOut, "virt agent: enrolled; start the agent: systemctl enable --now virtcon-agent.service (or virt agent run)")
	return nil
}

// readJoin reads the join string from file, or stdin: hidden when stdin
// is a terminal.
func readJoin(streams *IOStreams, file string) (string, error) {
	var r io.Reader
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", &UsageError{fmt.Errorf("--join-file: %w", err)}
		}
		defer f.Close()
		r = f
	} else if f, ok := streams.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(streams.ErrOut, "Join string (input hidden): ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(streams.ErrOut)
		if err != nil {
			return "", fmt.Errorf("read the join string: %w", err)
		}
		return string(b), nil
	} else {
		r = streams.In
	}
	b, err := io.ReadAll(io.LimitReader(r, maxJoinLen+1))
	if err != nil {
		return "", fmt.Errorf("read the join string: %w", err)
	}
	if len(b) > maxJoinLen {
		return "", &UsageError{fmt.Errorf("the join string is over %d bytes: want one line vcj1:…", maxJoinLen)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		where := "stdin"
		if file != "" {
			where = file
		}
		return "", &UsageError{fmt.Errorf("no join string in %s (want vcj1:ID.SECRET@HOST:PORT#sha256:PIN, from virt-director token create)", where)}
	}
	return string(b), nil
}

// agentWords adds to the agent's errors what the user can do.
func agentWords(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agent.ErrAlreadyEnrolled):
		return fmt.Errorf("%w (virt agent leave first; virt agent status shows the enrolment)", err)
	case errors.Is(err, agent.ErrRunning):
		return fmt.Errorf("%w (stop it first: systemctl stop virtcon-agent.service)", err)
	case errors.Is(err, agent.ErrNotEnrolled):
		return fmt.Errorf("%w (virt agent enroll < JOIN-FILE)", err)
	case errors.Is(err, agent.ErrRevoked), errors.Is(err, agent.ErrExpired):
		return fmt.Errorf("%w; VMs are untouched; enrol again with a new join string (virt agent enroll)", err)
	case errors.Is(err, agent.ErrTokenRefused):
		return fmt.Errorf("%w: ask the director's admin for a new one (virt-director token create)", err)
	case errors.Is(err, enroll.ErrPinMismatch):
		return fmt.Errorf("%w: the director is not the one the join string names, or someone is in between: nothing was stored", err)
	}
	return err
}

func newAgentRunCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Keep the host's session with its director (what virtcon-agent.service runs)",
		Long: `Keep the host's session with the director it enrolled with: register with the
host's facts and capabilities, heartbeat, send a host report every minute, renew
the certificate at a random point in 70-90 % of its life, and reconnect with
backoff (1 s growing to 120 s) when the connection fails. One agent per host (a
lock). It runs until SIGTERM or SIGINT (exit 0). When the director refuses the
credential as revoked or expired it stops, records an alert (virt agent status,
the DCUI's status line) and exits 5 without reconnecting; VMs are never touched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := env.Logger
			if !cmd.Flags().Changed("log-level") {
				// a service says what its session does
				log = slog.New(slog.NewTextHandler(env.IO.ErrOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			h := env.Host()
			return agentWords(agentRun(cmd.Context(), withLogger(h, log), agent.RunOptions{Logger: log}))
		},
	}
}

// withLogger is h with its services logging to log.
func withLogger(h *host.Host, log *slog.Logger) *host.Host {
	return host.New(host.Options{Layout: h.Layout, HostRoot: h.HostRoot, Logger: log})
}

func newAgentStatusCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the enrolment, the director, the node, the certificate and the session",
		Long: `Show the host's enrolment (director, node id, CA pin, certificate serial and
expiry) and the running agent's session (connecting, connected, backoff) with
its last answered heartbeat and last error, from the local files only: it
contacts nobody. -o json prints the fields documented in docs/cli.md.
Exit code 5 when the credential was revoked or expired (the alert stays until
the host enrols again).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := agent.ReadStatus(env.Layout())
			if err != nil {
				return err
			}
			if err := render(env.IO.Out, env.Output, st, func(w io.Writer) error { return writeAgentStatus(w, st, time.Now()) }); err != nil {
				return err
			}
			switch st.Alert {
			case agent.AlertRevoked:
				return agentWords(fmt.Errorf("director %s, node %s: %w", st.Director, st.NodeID, agent.ErrRevoked))
			case agent.AlertExpired:
				return agentWords(fmt.Errorf("director %s, node %s: %w", st.Director, st.NodeID, agent.ErrExpired))
			}
			return nil
		},
	}
}

func writeAgentStatus(w io.Writer, s *agent.Status, now time.Time) error {
	if !s.Enrolled {
		_, err := fmt.Fprintln(w, "Enrolled:\tno (virt agent enroll < JOIN-FILE)")
		return err
	}
	row := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
	row("Enrolled", "yes")
	row("Director", s.Director)
	row("Node", s.NodeID)
	row("CA pin", s.Pin)
	row("Certificate", fmt.Sprintf("serial %s, valid until %s (%s)", s.CertSerial, s.CertNotAfter.Local().Format(time.RFC3339), until(s.CertNotAfter, now)))
	switch {
	case s.Running:
		row("Agent", fmt.Sprintf("running (pid %d), %s", s.PID, s.State))
	default:
		row("Agent", "not running")
	}
	if !s.LastHeartbeatAck.IsZero() {
		row("Last heartbeat", fmt.Sprintf("%s (%s ago)", s.LastHeartbeatAck.Local().Format(time.RFC3339), now.Sub(s.LastHeartbeatAck).Round(time.Second)))
	}
	if s.LastError != "" {
		row("Last error", s.LastError)
	}
	if !s.NextRetry.IsZero() {
		row("Next retry", s.NextRetry.Local().Format(time.RFC3339))
	}
	if s.Alert != "" {
		row("Alert", strings.TrimPrefix(s.Line(), "Director: ")+" (virt agent enroll)")
		if s.AlertReason != "" {
			row("Reason", s.AlertReason)
		}
	}
	return nil
}

func until(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d <= 0:
		return "EXPIRED"
	case d < 48*time.Hour:
		return d.Round(time.Minute).String() + " left"
	}
	return fmt.Sprintf("%d days left", int(d.Hours()/24))
}

func newAgentLeaveCmd(env *Env) *cobra.Command {
	var local bool
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Leave the director: it revokes the node, then the local credentials are deleted",
		Long: `Leave the director: ask it to revoke this node (with the node's own certificate),
then delete the local credentials (/etc/virtcon/agent) and any alert. With
--local only the credentials are deleted, telling the director nothing (when it
is gone or unreachable: the node stays listed there until its admin revokes or
forgets it). The agent must be stopped first. VMs are untouched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := agent.ReadStatus(env.Layout())
			if err != nil && !local {
				return err
			}
			if err := agentLeave(cmd.Context(), env.Host(), local); err != nil {
				err = agentWords(err)
				if !local && !errors.Is(err, agent.ErrRunning) && !errors.Is(err, agent.ErrNotEnrolled) {
					err = fmt.Errorf("%w (virt agent leave --local deletes the credentials without telling the director)", err)
				}
				return err
			}
			if st != nil && st.Enrolled {
				fmt.Fprintf(textOnly{env.IO.ErrOut}, "virt agent: left %s (node %s); credentials deleted\n", st.Director, st.NodeID)
			} else {
				fmt.Fprintln(env.IO.ErrOut, "virt agent: credentials deleted")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&local, "local", false, "only delete the local credentials, without telling the director")
	return cmd
}

func newAgentConfigCheckCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "config-check",
		Short: "Check the local credentials: modes, key and certificate, CA chain and pin, expiry, agent.yaml",
		Long: `Check the agent's local files without contacting the director: the directory
0700 and the files 0600, agent.yaml valid, identity.pem a key with its
certificate, the certificate chaining to ca.pem and naming agent.yaml's node,
the pin equal to ca.pem's, the certificate's validity, and no revocation alert.
Exit code 3 when a check FAILs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs, err := agent.ConfigCheck(env.Layout())
			if err != nil {
				return agentWords(err)
			}
			if err := render(env.IO.Out, env.Output, fs, func(w io.Writer) error {
				fmt.Fprintln(w, "STATUS\tCHECK\tDETAIL")
				for _, f := range fs {
					fmt.Fprintf(w, "%s\t%s\t%s\n", env.status(hostinfo.Status(f.Status)), f.ID, f.Detail)
				}
				return nil
			}); err != nil {
				return err
			}
			for _, f := range fs {
				if f.Status == agent.FindingFail {
					return ErrCheckFailed
				}
			}
			return nil
		},
	}
}
