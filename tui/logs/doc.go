// Package logs is the DCUI's log viewer: virtcon's own logs (every *.log
// in the log directory) and each VM's serial console log, in a file
// picker beside a scrollable, searchable view that can follow a growing
// file.
//
// It owns the screen's layout and keys, the tail read (only the last MiB
// of a file, so a huge log never blocks the console or bloats memory) and
// the splitting of log text into lines with tabs expanded; each line is
// made safe to draw by common.Clean (escape sequences and control
// characters from serial consoles removed, ASCII only in the plain tier).
// It only reads, never writes or truncates a log, and every read is a
// tea.Cmd through an injected Sources; where VM serial logs live is the
// vm.Manager's to say.
package logs
