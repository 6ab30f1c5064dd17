// Command dcui is the virtcon console UI: the status screen, PAM login and
// the screens that manage the host. See docs/dcui.md.
//
// Exit codes: 0 quit, 1 error, 2 bad flags.
//
// main holds no logic: it runs a re-executed child mode if it is one
// (reexec.Init) and otherwise tui/dcui.Main.
package main
