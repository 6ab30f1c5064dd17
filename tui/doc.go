// Package tui holds the DCUI, virtcon's console user interface. It is an
// adapter over the core packages (hostinfo, vm, netcfg, auth, diag,
// power): it reads and acts through them and never reimplements host
// logic. Subpackages:
//
//   - term: terminal tier detection (rich, linux, plain/serial) and sizing;
//   - styles: every lipgloss style, per tier;
//   - keys: the global key map, each function key with a letter alias;
//   - common: what every component shares (size, styles, keys, logger,
//     clock, login session), the Screen contract and its messages, and the
//     shared rules: Fit, Clean (host text made safe to draw), ShellQuote
//     and the confirmation dialogs' keys and wording;
//   - app: the root model (frame, header, tabs, CLI line, legends), the
//     login form, the idle lock and the single-writer console lock;
//   - dcui: a session (Run: a terminal, a tier, the host's services behind
//     every screen, the session's ctx) and the program around one (Main:
//     flags, log file, signals); its tests tour every screen in the frame
//     and run a session on a pty;
//   - status: the status screen, shown without login;
//   - vms: the virtual machines list, lifecycle actions and console;
//   - network: the management interface and bridges, edits on trial;
//   - hardware: the hostinfo inventory and health checks;
//   - logs: virtcon's logs and the VM serial logs, searchable;
//   - diagnostics: writing the support bundle;
//   - power: rebooting or powering off the host;
//   - tuitest: checks the screens' tests share (sizes, ASCII, goldens,
//     keys by name), over internal/testutil; tests import it, never the
//     program.
//
// No tui package imports cli, and cli imports none of them.
package tui
