// Command virt is the virtcon command line (package cli). See
// docs/cli.md and docs/cli-reference.md.
//
// main holds no logic: it runs a re-executed child mode if it is one
// (reexec.Init) and otherwise cli.Main, whose exit codes are cli's.
package main
