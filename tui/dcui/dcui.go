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
	"sync/atomic"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/buildinfo"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/status"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/webterm"
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
	// WebSessionFD is the descriptor a web terminal passes the session's
	// identity on (--web-session-fd); -1: none, log in with PAM.
	WebSessionFD int
	// Repaint is --repaint: 0 the tier's default, negative off.
	Repaint time.Duration
}

// EnvRepaint sets --repaint's default (tests use a short period).
const EnvRepaint = "VIRTCON_DCUI_REPAINT"

// repaintValue is --repaint: "auto" (the tier's default), "off" or "0",
// or a period of at least a second (bare seconds too).
type repaintValue struct{ d *time.Duration }

func (v repaintValue) String() string {
	switch {
	case v.d == nil || *v.d == 0:
		return "auto"
	case *v.d < 0:
		return "off"
	}
	return v.d.String()
}

func (v repaintValue) Set(s string) error {
	switch strings.TrimSpace(s) {
	case "auto", "":
		*v.d = 0
		return nil
	case "off", "0":
		*v.d = -1
		return nil
	}
	d, err := duration.Parse(s)
	if err != nil {
		return err
	}
	if d < time.Second {
		return fmt.Errorf("%s: want at least 1s, off or auto", d)
	}
	*v.d = d
	return nil
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
	fs.IntVar(&f.WebSessionFD, "web-session-fd", -1, "start logged in as the user a web terminal (virt webterm) passes on this inherited pipe; root only")
	rv := repaintValue{d: &f.Repaint}
	if env := os.Getenv(EnvRepaint); env != "" {
		if err := rv.Set(env); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", EnvRepaint, env, err)
		}
	}
	fs.Var(rv, "repaint", "repaint the whole screen this often while idle and at the first key after a pause: auto (15s on the plain tier and on a kernel console, else off), off, or a period such as 15s (env "+EnvRepaint+")")
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

// geteuid is os.Geteuid; a test seam.
var geteuid = os.Geteuid

// webSession reads the identity a web terminal passed on fd. Only root
// may start a DCUI logged in, and only through a pipe (what the server
// wrote and closed): a file or a terminal anyone could have filled is
// refused, as is fd 0-2 (the session's terminal).
func webSession(fd int) (*webterm.Identity, error) {
	if uid := geteuid(); uid != 0 {
		return nil, fmt.Errorf("--web-session-fd %d: refused: only root may start a session logged in (this runs as uid %d)", fd, uid)
	}
	if fd < 3 {
		return nil, fmt.Errorf("--web-session-fd %d: refused: descriptors 0-2 are the terminal; want an inherited pipe (3 or more)", fd)
	}
	id, err := webterm.ReadIdentity(os.NewFile(uintptr(fd), "web-session"))
	if err != nil {
		return nil, fmt.Errorf("--web-session-fd %d: refused: %w", fd, err)
	}
	return id, nil
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

// Config is one DCUI session: where it draws and reads keys, who it is for
// and the host it shows. Run is the same for the host console (Main), a
// PTY of the web terminal, or a test.
type Config struct {
	// In and Out are the session's terminal: keys in, frames out. A
	// terminal (*os.File on a tty or a pty) is put in raw mode and
	// restored when the session ends. nil means the process's own
	// (stdin, or the controlling tty when stdin is none; stdout).
	In  io.Reader
	Out io.Writer
	// TERM is the session's terminal type (TERM=); with TTYName and Tier
	// it picks the capability tier.
	TERM string
	// Env is the session's environment as Bubble Tea reads it (colour
	// settings: COLORTERM, NO_COLOR, ...); TERM above replaces its TERM.
	// nil: TERM alone.
	Env []string
	// Tier overrides the detected tier: "rich", "linux" or "plain"; ""
	// detects it from TERM and TTYName.
	Tier string
	// Width and Height lay the session out for that size instead of the
	// terminal's (--size); 0 follows the terminal.
	Width, Height int
	// TTYName names the console for the audit log, the console lock and
	// the header ("tty1", "ttyS0", "pts/3").
	TTYName string

	// Host is the core the screens read and change (host.New), built once
	// per process; its logger is the session's log (never the screen).
	Host *host.Host
	// PAMService is the PAM service used to log in (default
	// auth.DefaultService); AdminGroup the group whose members (and root)
	// may log in (default auth.DefaultGroup).
	PAMService, AdminGroup string
	// PAMHelper is the program that runs each PAM transaction in a child
	// process (this program, whose main calls reexec.Init first: the
	// "pam-helper" mode); "" runs PAM in this process.
	PAMHelper string
	// IdleTimeout locks the session after this long without input
	// (default auth.DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Console is the host console (getty units): q and ctrl+c do not quit.
	Console bool
	// Hostname is shown on the header until the status screen knows it.
	Hostname string
	// WebSession is the user a web terminal logged in (ReadIdentity of
	// --web-session-fd): the session starts logged in as them, takes the
	// console lock like any login, and ends when they log out. The idle
	// lock is off: the web terminal's server keeps the idle time and ends
	// the session. nil: a console with the login form.
	WebSession *webterm.Identity
	// Repaint is how often the whole screen is repainted while idle (and
	// before the first key after a pause): 0 the default (app.DefaultRepaint
	// on the plain tier, where a terminal may attach mid-session, and on a
	// console the kernel prints on; off on other terminals, which nothing
	// writes over), negative off.
	Repaint time.Duration
	// KernelConsole: the kernel prints its messages on this terminal
	// (term.IsKernelConsole); the DCUI then says so on its message line.
	KernelConsole bool
}

// repaintPeriod is the session's repaint period, 0 for none.
func repaintPeriod(tier term.Tier, kernelConsole bool, d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > 0:
		return d
	case tier == term.Plain || kernelConsole:
		return app.DefaultRepaint
	}
	return 0
}

// Run runs one DCUI session until the operator quits or ctx ends. Ending
// ctx cancels what the screens have in flight (every command derives from
// it) and ends the program with the terminal restored; that is the normal
// end of a session whose host goes away (a closed web terminal, a signal
// to Main), so Run then returns nil. Run handles no signals: its host
// does. A panic inside the program or in Run is logged with its stack
// and returned as an error wrapping tea.ErrProgramPanic.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.Host == nil {
		return errors.New("dcui: no host")
	}
	h := cfg.Host
	log := h.Log
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = auth.DefaultIdleTimeout
	}
	if cfg.AdminGroup == "" {
		cfg.AdminGroup = auth.DefaultGroup
	}
	defer func() {
		if r := recover(); r != nil {
			log.Error("panic", "value", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("dcui: %w: %v", tea.ErrProgramPanic, r)
		}
	}()
	// the session's commands end with it, also when the operator quits
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	tier := term.Detect(cfg.TERM, cfg.TTYName, cfg.Tier)
	c := common.New(ctx, tier, log)
	c.Session.TTY = cfg.TTYName
	bi := buildinfo.Get()
	st := status.New(c, status.LiveSources(h), status.Options{Product: "virtcon", Version: bi.Version})
	idle := auth.NewIdleTimer(cfg.IdleTimeout)
	pages := livePages(c, h, cfg.IdleTimeout, idle.Touch)
	// PAM runs in a child process (the helper's main calls reexec.Init
	// first): its modules' memory and crashes stay out of the console
	a := h.Auth(auth.Options{Service: cfg.PAMService, Group: cfg.AdminGroup, PAMProcess: cfg.PAMHelper})
	login := app.LoginFunc(func(ctx context.Context, user, password, tty string) (string, error) {
		id, err := a.Login(ctx, user, password, tty)
		if err != nil {
			return "", err
		}
		return id.User, nil
	})
	layout := h.Layout
	locker := func(user, tty string) (func() error, string, error) {
		l, holder, err := auth.AcquireConsole(layout, user, tty)
		switch {
		case err != nil:
			return nil, "", err
		case l == nil:
			hd := "another console"
			if holder != nil && holder.User != "" {
				hd = holder.String()
			}
			return nil, hd, nil
		}
		return l.Release, "", nil
	}
	var appIdle app.Idle = idle
	loggedIn := ""
	if w := cfg.WebSession; w != nil {
		appIdle, loggedIn = nil, w.User
		log.Info("web session", "user", w.User, "uid", w.UID, "source", w.Source, "session", w.Session)
	}
	m := app.New(c, st, pages, login, locker, appIdle, app.Options{
		Product: "virtcon", Version: bi.Version, TTY: cfg.TTYName, Kiosk: cfg.Console,
		AdminGroup: cfg.AdminGroup, IdleTimeout: cfg.IdleTimeout, Hostname: cfg.Hostname,
		LoggedIn: loggedIn, Repaint: repaintPeriod(tier, cfg.KernelConsole, cfg.Repaint), KernelConsole: cfg.KernelConsole,
	})
	if cfg.Width > 0 && cfg.Height > 0 {
		m.SetSize(cfg.Width, cfg.Height)
		status.FixSize(st)
		m.FixSize()
	}
	log.Info("dcui start", "version", bi.Version, "tier", tier.String(), "tty", cfg.TTYName, "term", cfg.TERM, "pid", os.Getpid(),
		"repaint", repaintPeriod(tier, cfg.KernelConsole, cfg.Repaint).String(), "kernelConsole", cfg.KernelConsole)

	// No tea.WithContext: a program killed through its context closes its
	// input reader without waiting for the read loop (a data race in
	// cancelreader, seen under -race). The session's end quits the
	// program instead, which waits for it; Kill only if that hangs.
	opts := []tea.ProgramOption{tea.WithoutSignalHandler(), tea.WithEnvironment(sessionEnv(cfg.Env, cfg.TERM))}
	if cfg.In != nil {
		opts = append(opts, tea.WithInput(cfg.In))
	}
	out := cfg.Out
	if out == nil {
		out = os.Stdout
	}
	if tier == term.Plain {
		// a VT220 line gets no xterm/kitty queries or modes: nothing
		// answers late into the input, and the first frame is drawn
		// whole at once, with nothing to wait for
		out = term.VT220(out)
	}
	opts = append(opts, tea.WithOutput(out))
	p := newProgram(m, tier, opts...)
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			p.Quit()
			select {
			case <-finished:
			case <-time.After(quitGrace):
				p.Kill()
			}
		case <-finished:
		}
	}()
	final, err := p.Run()
	close(finished)
	m.Close()
	if fm, ok := final.(*app.Model); ok && err == nil && fm.LoggedOut() {
		log.Info("dcui exit", "reason", "the web session's user logged out")
		return ErrLoggedOut
	}
	if err == nil && ctx.Err() != nil {
		log.Info("dcui exit", "reason", context.Cause(ctx).Error())
		return nil
	}
	if err != nil && errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil && !errors.Is(err, tea.ErrProgramPanic) {
		// ended from outside through ctx: the session is over, not failed
		log.Info("dcui exit", "reason", context.Cause(ctx).Error())
		return nil
	}
	if err != nil {
		log.Error("dcui", "err", err)
		return err
	}
	log.Info("dcui exit")
	return nil
}

// ErrLoggedOut is Run's answer when the user of a web session logged
// out or locked: Main exits with webterm.ExitLoggedOut, on which the web
// terminal ends the whole login (every tab), not only this session.
var ErrLoggedOut = errors.New("dcui: the web session's user logged out")

// quitGrace is how long a session that ended gets to quit before it is
// killed.
const quitGrace = 2 * time.Second

// sessionEnv is env with TERM set to termEnv.
func sessionEnv(env []string, termEnv string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TERM=") {
			out = append(out, kv)
		}
	}
	return append(out, "TERM="+termEnv)
}

// Main runs the DCUI on the process's terminal: flags, the log file, the
// signals, then Run until the operator quits, a signal comes or ctx ends.
// Exit codes: 0 quit, 1 error, 2 bad flags.
func Main(ctx context.Context) (code int) {
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "dcui:", err)
		}
		return 2
	}
	var web *webterm.Identity
	if f.WebSessionFD >= 0 {
		if web, err = webSession(f.WebSessionFD); err != nil {
			fmt.Fprintln(os.Stderr, "dcui:", err)
			return 2
		}
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
	// Run records panics in the log; this records any outside it.
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
	if web != nil {
		tty = web.TTYName()
	} else if tty == "" {
		tty = ttyName()
	}
	var w, h int
	if f.Size != "" {
		if w, h, err = term.ParseSize(f.Size); err != nil {
			fmt.Fprintln(os.Stderr, "dcui:", err)
			return 2
		}
	}
	self, err := os.Executable()
	if err != nil {
		self = ""
	}
	hostname, _ := os.Hostname()
	// the kernel prints on the consoles listed there (the DCUI says so)
	active, _ := os.ReadFile("/" + term.KernelConsoleFile)

	// a hung-up line (serial cable, closed SSH) or SIGTERM (systemd, a
	// getty restart) ends the session cleanly, also while a VM console has
	// the terminal: the session's ctx ends the console, then the program,
	// which restores the terminal. SIGINT (kill -INT: in raw mode ctrl+c
	// is a key) ends it too, with exit status 1, as an interrupt.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var interrupted atomic.Bool
	go func() {
		select {
		case sig := <-sigs:
			log.Info("signal: quitting", "signal", sig.String())
			interrupted.Store(sig == syscall.SIGINT)
			cancel()
		case <-ctx.Done():
		}
	}()

	err = Run(ctx, Config{
		TERM: os.Getenv("TERM"), Env: os.Environ(), Tier: override, Width: w, Height: h, TTYName: tty,
		Host:       host.New(host.Options{Layout: layout, HostRoot: "/", Logger: log}),
		PAMService: f.PAMService, AdminGroup: f.AdminGroup, PAMHelper: self,
		IdleTimeout: f.IdleTimeout, Console: f.Console, Hostname: hostname,
		WebSession: web, Repaint: f.Repaint, KernelConsole: web == nil && term.IsKernelConsole(string(active), tty),
	})
	switch {
	case errors.Is(err, ErrLoggedOut):
		return webterm.ExitLoggedOut
	case errors.Is(err, tea.ErrProgramPanic):
		fmt.Fprintln(os.Stderr, "dcui: internal error, see", logPath)
		return 1
	case err != nil:
		if !errors.Is(err, tea.ErrInterrupted) && !errors.Is(err, tea.ErrProgramKilled) {
			fmt.Fprintln(os.Stderr, "dcui:", err)
		}
		return 1
	case interrupted.Load():
		return 1
	}
	return 0
}
