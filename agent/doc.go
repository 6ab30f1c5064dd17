// Package agent is the host side of the director protocol (issue 13):
// enrolment with a one-time token into a per-node mTLS identity, the live
// session (register, heartbeats, host reports, certificate renewal,
// reconnection with backoff), leaving, and the status and checks of the
// local credentials. It is thin over package host: what it tells the
// director (host facts, capabilities, VM counts) comes from host's
// services, read-only.
//
//   - enroll.go: Enroll (pin checked in the TLS handshake before the token
//     is sent; the key written before the CSR goes out, reused on a retry).
//   - run.go, session.go, backoff.go, report.go, facts.go: Run, the one
//     session at a time that `virt agent run` keeps.
//   - files.go, config.go, record.go, alert.go: the credentials under
//     paths.Layout.AgentDir (dir 0700, files 0600: identity.pem = key +
//     leaf + intermediate in one atomic write, ca.pem, agent.yaml), the
//     persistent alert (AgentStateDir/alert.json: revoked or expired), the
//     runtime record (AgentRecordFile) and the lock (AgentLockFile).
//   - status.go, check.go, leave.go: ReadStatus and its one line,
//     ConfigCheck, Leave.
//
// What it must not do: it never calls a mutating VM method (no start,
// stop, delete: a revoked or expired credential, a director that is down
// or gone, touches no VM), it executes no command on anyone's behalf, and
// there is no way for the director to make it do either (agent_test.go
// holds this). It imports neither cobra nor Bubble Tea, and nothing of the
// director. The token secret and the node key never reach a log, an
// error or a file other than the credentials.
package agent
