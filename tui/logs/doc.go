// Package logs is the DCUI's log viewer: virtcon's own logs (every *.log
// in the log directory) and each VM's serial console log, in a file
// picker beside a scrollable, searchable view that can follow a growing
// file.
//
// It owns the screen's layout and keys, the tail read (only the last MiB
// of a file, so a huge log never blocks the console or bloats memory) and
// the cleaning of log text for the terminal: escape sequences and control
// characters from serial consoles are removed, and the plain tier shows
// ASCII only. It only reads, never writes or truncates a log, and every
// read is a tea.Cmd through an injected Sources.
package logs
