// Package dcui wires the DCUI program: flags, the log file, the terminal
// tier, the core (auth, vm, netcfg, hostinfo) behind each screen, and the
// Bubble Tea program. cmd/dcui is a thin main over Main.
package dcui

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/internal/buildinfo"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/status"
	"github.com/virtcon/virtcon/tui/term"
)

// Flags are the program's options.
type Flags struct {
	Tier        string
	Root        string
	Size        string
	PAMService  string
	AdminGroup  string
	IdleTimeout time.Duration
	Console     bool
	TTY         string
}

func parseFlags(args []string, stderr io.Writer) (*Flags, error) {
	f := &Flags{}
	fs := flag.NewFlagSet("dcui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.Tier, "tier", "", "terminal tier: rich, linux or plain (default: from virtcon.console=, the tty and TERM)")
	fs.StringVar(&f.Root, "root", os.Getenv(paths.EnvRoot), "virtcon state root (default /; env VIRTCON_ROOT)")
	fs.StringVar(&f.Size, "size", "", "lay out for WxH instead of the terminal's size (for example 80x24)")
	fs.StringVar(&f.PAMService, "pam-service", "virtcon", "PAM service used to log in (/etc/pam.d/NAME)")
	fs.StringVar(&f.AdminGroup, "admin-group", "virtcon-admin", "group whose members (and root) may log in")
	// bare seconds too (--idle-timeout 300), as every virtcon duration flag
	fs.Var(duration.NewValue(&f.IdleTimeout, auth.DefaultIdleTimeout), "idle-timeout", "lock the console after this long without input (300, 300s, 5m)")
	fs.BoolVar(&f.Console, "console", false, "host console mode (getty units): q and ctrl+c do not quit")
	fs.StringVar(&f.TTY, "tty", "", "console name for the audit log and the console lock (default: the terminal's device)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if f.Tier != "" {
		if _, err := term.ParseTier(f.Tier); err != nil {
			return nil, err
		}
	}
	if f.IdleTimeout <= 0 {
		return nil, fmt.Errorf("--idle-timeout %s: must be positive", f.IdleTimeout)
	}
	if f.PAMService == "" || strings.ContainsAny(f.PAMService, "/\x00") {
		return nil, fmt.Errorf("--pam-service %q: want a file name under /etc/pam.d", f.PAMService)
	}
	return f, nil
}

// ttyName is the console's name for humans and the audit log: "tty1",
// "ttyS0", "pts/3".
func ttyName() string {
	p, err := os.Readlink("/proc/self/fd/0")
	if err != nil || !strings.HasPrefix(p, "/dev/") {
		return ""
	}
	return strings.TrimPrefix(p, "/dev/")
}

// newProgram is the Bubble Tea program of a tier: at most 4 redraws a
// second on a serial line. Bubble Tea's own panic handling stays on: a
// panic in Update, View or a command restores the terminal before Run
// returns ErrProgramPanic.
func newProgram(m tea.Model, tier term.Tier, opts ...tea.ProgramOption) *tea.Program {
	return tea.NewProgram(m, append([]tea.ProgramOption{tea.WithFPS(tier.MaxFPS())}, opts...)...)
}

// Main runs the DCUI. Exit codes: 0 quit, 1 error, 2 bad flags.
func Main() (code int) {
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "dcui:", err)
		}
		return 2
	}
	layout := paths.New(f.Root)

	// The TUI owns the screen: logs go to a file only. Without one (a
	// root file system remounted read-only after errors) the console
	// still runs: it is the last way into a broken host.
	logPath := filepath.Join(layout.LogDir(), "dcui.log")
	var logOut io.Writer = io.Discard
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		fmt.Fprintln(os.Stderr, "dcui: no log file, continuing without:", err)
	} else if lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640); err != nil {
		fmt.Fprintln(os.Stderr, "dcui: no log file, continuing without:", err)
	} else {
		defer lf.Close()
		logOut = lf
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	if !auth.PAMAvailable {
		log.Error("built without cgo: PAM login unavailable; rebuild with CGO_ENABLED=1 (make build)")
	}
	// Bubble Tea restores the terminal on panics inside the program; this
	// records them, and any outside it, in the log.
	defer func() {
		if r := recover(); r != nil {
			log.Error("panic", "value", fmt.Sprint(r), "stack", string(debug.Stack()))
			fmt.Fprintln(os.Stderr, "dcui: internal error, see", logPath)
			code = 1
		}
	}()

	override := f.Tier
	if override == "" {
		if b, err := os.ReadFile("/proc/cmdline"); err == nil {
			override = term.CmdlineOverride(string(b))
		}
	}
	tty := f.TTY
	if tty == "" {
		tty = ttyName()
	}
	tier := term.Detect(os.Getenv("TERM"), tty, override)

	c := common.New(context.Background(), tier, log) // the session ctx comes with dcui.Run
	c.Session.TTY = tty
	bi := buildinfo.Get()
	st := status.New(c, status.LiveSources(layout, "/", log), status.Options{Product: "virtcon", Version: bi.Version})
	fg := &common.Foreground{}
	idle := auth.NewIdleTimer(f.IdleTimeout)
	pages := livePages(c, layout, log, f.IdleTimeout, fg, idle.Touch)
	// PAM runs in a child process (cmd/dcui calls reexec.Init first):
	// its modules' memory and crashes stay out of the console
	self, err := os.Executable()
	if err != nil {
		self = ""
	}
	a := auth.New(layout, log, auth.Options{Service: f.PAMService, Group: f.AdminGroup, PAMProcess: self})
	login := app.LoginFunc(func(ctx context.Context, user, password, tty string) (string, error) {
		id, err := a.Login(ctx, user, password, tty)
		if err != nil {
			return "", err
		}
		return id.User, nil
	})
	locker := func(user, tty string) (func() error, string, error) {
		l, holder, err := auth.AcquireConsole(layout, user, tty)
		switch {
		case err != nil:
			return nil, "", err
		case l == nil:
			h := "another console"
			if holder != nil && holder.User != "" {
				h = holder.String()
			}
			return nil, h, nil
		}
		return l.Release, "", nil
	}
	hostname, _ := os.Hostname()
	m := app.New(c, st, pages, login, locker, idle, app.Options{
		Product: "virtcon", Version: bi.Version, TTY: tty, Kiosk: f.Console,
		AdminGroup: f.AdminGroup, IdleTimeout: f.IdleTimeout, Hostname: hostname,
	})
	if f.Size != "" {
		w, h, err := term.ParseSize(f.Size)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dcui:", err)
			return 2
		}
		m.SetSize(w, h)
		status.FixSize(st)
		m.FixSize()
	}
	log.Info("dcui start", "version", bi.Version, "tier", tier.String(), "tty", tty, "term", os.Getenv("TERM"), "pid", os.Getpid())

	p := newProgram(m, tier)
	// a hung-up line (serial cable, closed SSH) or SIGTERM (systemd, a
	// getty restart) ends the program cleanly, also while a VM console has
	// the terminal (Bubble Tea ignores signals then): the console is ended
	// first, then the program quits and restores the terminal
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	go func() {
		if sig, ok := <-sigs; ok {
			log.Info("signal: quitting", "signal", sig.String())
			fg.Cancel()
			p.Quit()
		}
	}()
	defer signal.Stop(sigs)
	_, err = p.Run()
	m.Close()
	if err != nil {
		log.Error("dcui", "err", err)
		if errors.Is(err, tea.ErrProgramPanic) {
			fmt.Fprintln(os.Stderr, "dcui: internal error, see", logPath)
		} else if !errors.Is(err, tea.ErrInterrupted) && !errors.Is(err, tea.ErrProgramKilled) {
			fmt.Fprintln(os.Stderr, "dcui:", err)
		}
		return 1
	}
	log.Info("dcui exit")
	return 0
}
