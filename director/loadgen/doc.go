// Package loadgen simulates many agents against a director, for the
// benchmarks (scripts/dirload) and a smoke test that keeps it working:
// each simulated agent makes its own key, enrols with its own token over
// a pinned TLS connection, and holds its own mTLS HTTP/2 connection with
// one Session stream, heartbeating at a period. With Options it also
// advertises task kinds and answers each task Queued then Succeeded (a
// task delivered again only gets its last status, as a real agent's
// journal does), and answers each Resync with a synthetic inventory;
// Dispatch times tasks through the admin API. It is a load generator,
// not an agent: no host facts, no reports, no renewal.
package loadgen
