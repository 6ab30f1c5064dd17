// Package agent is the host side of the director protocol (issues 13, 14):
// enrolment with a one-time token into a per-node mTLS identity, the live
// session (register, heartbeats, host reports, certificate renewal,
// reconnection with backoff), leaving, and the status and checks of the
// local credentials. It is thin over package host: what it tells the
// director (host facts, capabilities, VM counts) comes from host's
// services, read-only; what it changes, it changes in typed tasks.
//
//   - enroll.go: Enroll (pin checked in the TLS handshake before the token
//     is sent; the key written before the CSR goes out, reused on a retry).
//   - run.go, session.go, backoff.go, report.go, facts.go, directors.go:
//     Run, the one session at a time that `virt agent run` keeps, over the
//     director's addresses in turn (agent.yaml director and directors).
//   - files.go, config.go, record.go, alert.go: the credentials under
//     paths.Layout.AgentDir (dir 0700, files 0600: identity.pem = key +
//     leaf + intermediate in one atomic write, ca.pem, agent.yaml), the
//     persistent alert (AgentStateDir/alert.json: revoked or expired), the
//     runtime record (AgentRecordFile) and the lock (AgentLockFile).
//   - status.go, check.go, leave.go: ReadStatus and its one line,
//     ConfigCheck, Leave.
//   - tasks.go, tasks_outbox.go, journal.go, task_exec.go, taskerr.go:
//     the director's typed tasks (issue 14). Each is journalled durably
//     (AgentStateDir/tasks/<id>.json) before its Queued status goes out:
//     a redelivered id gets its last status again and never runs twice;
//     one left unfinished by a previous process fails AGENT_RESTARTED.
//     Four workers, a queue of 64 (BUSY beyond), a deadline from receipt,
//     cancel by the director; statuses go through the outbox, which keeps
//     them across reconnects. task_exec.go calls what `virt` calls.
//   - task_network.go: apply-network, always a netcfg try: confirmed
//     (its own try only) once a session dialled after the apply is up,
//     else left to the try's watchdog (ROLLED_BACK); resumed after a
//     restart from the journal.
//   - inventory.go, inventory_watch.go: the VM inventory for Resync and
//     its deltas, from QMP events and inotify (one events reader per
//     running VM: the agent is that socket's only client), with a
//     reconciliation List every 5 minutes.
//
// What it must not do: it changes a VM or the host network only in a
// typed task received on an authenticated, pinned session, through the
// same host services `virt` calls: a mutating VM method or any network
// method is called only in task_exec.go and task_network.go, from the
// functions (*taskRunner).exec reaches by its switch over the Task kind.
// A revoked or expired credential, a director that is down or gone,
// touches no VM. It executes no command on anyone's behalf, ever (no
// os/exec, no exec call, no string command in any task), and never
// reaches the power service (agent_test.go TestMutationsOnlyInTasks
// holds this). It imports neither cobra nor Bubble Tea, and nothing of the
// director. The token secret and the node key never reach a log, an
// error or a file other than the credentials; a task's status never
// carries its manifest or cloud-init user data.
package agent
