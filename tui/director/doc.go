// Package director is the DCUI's Director screen: the node agent's
// enrolment and session as `virt agent status` tells them (director,
// node id, CA pin, certificate expiry, connection state, last heartbeat
// answered, the alert of a revoked or expired credential), and Enrol,
// which takes a join string pasted into a masked field, checks it with
// enroll.ParseJoin, shows the director's address and the start of the CA
// pin to compare with the director's admin, and after a y runs the
// agent's enrolment in a tea.Cmd. It then says how to start the agent
// (virtcon-agent.service); the screen never starts one itself.
//
// The token's secret is drawn nowhere: the field echoes a mask, the
// confirmation names the token by its id, the secret leaves the field
// for the enrolment only and the screen forgets it as soon as that
// starts. The enrolment refuses a join string without a pin (the CLI's
// --unsafe-skip-ca-pin is the only way past that) and a host enrolled
// and in good standing (virt agent leave first). Read-only consoles are
// refused with the session's reason.
//
// The screen holds no agent logic: reading the status and enrolling are
// injected functions (agent.ReadStatus, agent.Enroll in production,
// fakes in tests).
package director
