package power

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Action is what to do to the host.
type Action int

// The actions.
const (
	ActionReboot Action = iota
	ActionPowerOff
)

// String is the action's verb, as systemctl spells it.
func (a Action) String() string {
	if a == ActionPowerOff {
		return "poweroff"
	}
	return "reboot"
}

// ErrNoCommand is returned when no command to do an action was found.
var ErrNoCommand = errors.New("no command found")

// Command returns the argv that does a on the host whose root is root:
// `systemctl reboot|poweroff` when root/run/systemd/system exists (systemd
// is PID 1), else the plain `reboot`/`poweroff` program. lookPath finds a
// program on PATH (exec.LookPath for the live machine).
func Command(a Action, root string, lookPath func(string) (string, error)) ([]string, error) {
	prog, args := a.String(), []string(nil)
	if st, err := os.Stat(filepath.Join(root, "run", "systemd", "system")); err == nil && st.IsDir() {
		prog, args = "systemctl", []string{a.String()}
	}
	p, err := lookPath(prog)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w: %w", a, prog, ErrNoCommand, err)
	}
	return append([]string{p}, args...), nil
}

// Reboot syncs the file systems and reboots the host.
func Reboot(ctx context.Context, log *slog.Logger) error { return run(ctx, log, ActionReboot) }

// PowerOff syncs the file systems and powers the host off.
func PowerOff(ctx context.Context, log *slog.Logger) error { return run(ctx, log, ActionPowerOff) }

func run(ctx context.Context, log *slog.Logger, a Action) error {
	argv, err := Command(a, "/", exec.LookPath)
	if err != nil {
		return err
	}
	log.Warn("power: host going down", "action", a.String(), "command", strings.Join(argv, " "))
	// Flush dirty pages before anything else: if the command kills us
	// half-way, the disks are consistent.
	unix.Sync()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg != "" {
			return fmt.Errorf("%s: %s: %w: %s", a, strings.Join(argv, " "), err, msg)
		}
		return fmt.Errorf("%s: %s: %w", a, strings.Join(argv, " "), err)
	}
	return nil
}

// Service does power actions on the live host.
type Service struct{ log *slog.Logger }

// NewService returns the power service.
func NewService(log *slog.Logger) *Service { return &Service{log: log} }

// Do syncs the file systems and reboots or powers off the host.
func (s *Service) Do(ctx context.Context, a Action) error { return run(ctx, s.log, a) }
