// Package webterm is virtcon's web terminal: the DCUI in a browser.
//
//   - server.go, login.go, ws.go, session.go: the HTTPS server (TLS 1.2+,
//     never plain HTTP; a Host allow-list, http.CrossOriginProtection and
//     an exact Origin check on the WebSocket), the login through an
//     Authenticator (PAM in auth) with a __Host- cookie the server keeps
//     only as a hash, and per WebSocket a DCUI in a PTY: its own process,
//     told its user on an inherited pipe (identity.go), idle and lifetime
//     limits, reattach within a window, SIGHUP then SIGKILL, reaped.
//   - cert.go, names.go: the certificate (an admin's, or a self-signed one
//     for the host's names and addresses).
//   - static.go: the page and the vendored xterm.js, embedded.
//   - record.go, sessions.go: the runtime record and the list of sessions
//     it keeps while it runs, which virt webterm status and the DCUI's
//     status screen read.
//
// It is core: it imports neither cobra nor Bubble Tea, and never a tui
// screen (a session's DCUI is a separate process). It never touches a
// VM. Under the root it owns the record and sessions files (RunDir) and
// the self-made certificate (the caller's StateDir).
package webterm
