// Package tui holds the DCUI, virtcon's console user interface. It is an
// adapter over the core packages (hostinfo, vm, netcfg): it reads through
// them and never reimplements host logic. Subpackages:
//
//   - term: terminal tier detection (rich, linux, plain/serial) and sizing;
//   - styles: every lipgloss style, per tier;
//   - keys: the key map, each function key with a letter alias;
//   - common: what every component shares (size, styles, keys, logger, clock);
//   - status: the status screen shown without login.
package tui
