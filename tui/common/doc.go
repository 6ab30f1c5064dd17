// Package common is what every DCUI component shares: the size, styles,
// key map, logger, clock, the session's ctx and login session, the small
// interfaces a component and a screen have, and the messages the app
// sends screens.
//
// It does no I/O and holds no screen's logic and no host rule; its
// shared rules are about drawing and keys only (Fit, Clean, ShellQuote,
// the confirmation dialogs).
package common
