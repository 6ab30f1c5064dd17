// Command dcui is the virtcon console UI. For now it shows the status
// screen, read-only; login and the other screens come later.
//
// Exit codes: 0 quit, 1 error, 2 bad flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/netcfg"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/internal/buildinfo"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/status"
	"github.com/virtcon/virtcon/tui/term"
)

func main() {
	// virtcon re-executes its own binary for the KVM probe, the network
	// try watchdog and the DHCP client; those modes must never start a TUI
	kvmprobe.MaybeRunChild()
	netcfg.MaybeRunWatchdog()
	netcfg.MaybeRunDHCPClient()
	os.Exit(run())
}

func run() (code int) {
	fs := flag.NewFlagSet("dcui", flag.ContinueOnError)
	tierFlag := fs.String("tier", "", "terminal tier: rich, linux or plain (default: from virtcon.console=, the tty and TERM)")
	root := fs.String("root", os.Getenv(paths.EnvRoot), "virtcon state root (default /)")
	sizeFlag := fs.String("size", "", "lay out for WxH instead of the terminal's size (for example 80x24)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *tierFlag != "" {
		if _, err := term.ParseTier(*tierFlag); err != nil {
			fmt.Fprintln(os.Stderr, "dcui:", err)
			return 2
		}
	}
	layout := paths.New(*root)

	// The TUI owns the screen: logs go to a file only.
	logPath := filepath.Join(layout.LogDir(), "dcui.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		fmt.Fprintln(os.Stderr, "dcui: log:", err)
		return 1
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dcui: log:", err)
		return 1
	}
	defer lf.Close()
	log := slog.New(slog.NewTextHandler(lf, nil))
	// Bubble Tea restores the terminal on panics inside the program; this
	// records them, and any outside it, in the log.
	defer func() {
		if r := recover(); r != nil {
			log.Error("panic", "value", fmt.Sprint(r), "stack", string(debug.Stack()))
			fmt.Fprintln(os.Stderr, "dcui: internal error, see", logPath)
			code = 1
		}
	}()

	override := *tierFlag
	if override == "" {
		if b, err := os.ReadFile("/proc/cmdline"); err == nil {
			override = term.CmdlineOverride(string(b))
		}
	}
	tty, _ := os.Readlink("/proc/self/fd/0")
	tier := term.Detect(os.Getenv("TERM"), tty, override)

	c := common.New(tier, log)
	bi := buildinfo.Get()
	m := status.New(c, status.LiveSources(layout, "/", log), status.Options{Product: "virtcon", Version: bi.Version})
	if *sizeFlag != "" {
		w, h, err := term.ParseSize(*sizeFlag)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dcui:", err)
			return 2
		}
		m.SetSize(w, h)
		status.FixSize(m)
	}
	log.Info("dcui start", "version", bi.Version, "tier", tier.String(), "tty", tty, "term", os.Getenv("TERM"))

	p := tea.NewProgram(m, tea.WithFPS(tier.MaxFPS()))
	if _, err := p.Run(); err != nil {
		log.Error("dcui", "err", err)
		if errors.Is(err, tea.ErrProgramPanic) {
			fmt.Fprintln(os.Stderr, "dcui: internal error, see", logPath)
		} else if !errors.Is(err, tea.ErrInterrupted) {
			fmt.Fprintln(os.Stderr, "dcui:", err)
		}
		return 1
	}
	log.Info("dcui exit")
	return 0
}
