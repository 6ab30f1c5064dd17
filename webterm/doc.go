// Package webterm will hold virtcon's web terminal: the HTTPS and
// WebSocket server, its login, and a DCUI in a PTY per session (each its
// own process). Today it holds the runtime record that server keeps while
// it runs (record.go): where it listens, its URLs, its certificate and its
// process, which the DCUI's status screen reads to say how to reach it.
//
// It is core: it imports neither cobra nor Bubble Tea, and never a tui
// screen (a session's DCUI is a separate process). It owns the record
// file (paths.Layout.WebtermRecordFile) and nothing else under the root.
package webterm
