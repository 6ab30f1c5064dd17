// Package etcdstore is the director's etcd: an embedded single member by
// default or an external cluster, behind a small JSON key-value API (Get,
// Put with TTL, Delete, paginated List, conditional Txn, Watch). Every key
// is relative to one prefix (DefaultPrefix), so several directors, or
// several tests, share one cluster without seeing each other's keys.
//
// It owns the etcd member, its files under DataDir and the client; what
// the keys mean belongs to the director. It imports none of the host core.
//
// # Embedded member
//
// DataDir/lock is taken first, without waiting (a second process on the
// same dir would otherwise block forever in etcd's own bbolt lock): Open
// fails at once with ErrLocked naming the holder's pid. The member lives in
// DataDir/etcd (0700) and serves clients on the unix socket DataDir/etcd.sock
// (0600, an absolute unix:// URL; no TCP port). It opens no peer listener
// at all: embed accepts an empty ListenPeerUrls, and a lone member never
// dials its peer URL, which is only recorded in the membership
// (http://127.0.0.1:2380, where nothing of ours listens). The alternatives
// were worse: an absolute unix peer URL becomes an autobound abstract
// socket that anyone in the network namespace can reach (measured:
// "@9647a"), a relative one makes etcd os.Remove() a directory, and a TCP
// port would need its own TLS. TestNoPeerListener checks that the process
// listens on no TCP port and no abstract socket.
//
// Compaction is periodic with a 1 h retention; lease checkpoints are on so a
// restart does not reset every lease to its full TTL. Measured here
// (2 cores): a cold Open takes 0.1-0.3 s, a warm one 0.12-0.53 s (it waits
// out its own election), Close 2-4 ms; RSS +8 MB on an empty store; on disk
// 62 MB after Close (64 MB preallocated WAL) and 123 MB while running (the
// next WAL segment is preallocated too).
//
// # Logs
//
// etcd's zap logs go to Options.Logger: its DEBUG is dropped (apply traces
// print every value written, secrets included), INFO becomes DEBUG, WARN
// and ERROR stay; the errors a normal Close logs ("mux: server closed", ...)
// and two start-up warnings about unused features are DEBUG.
//
// # Leases
//
// A Put with ttl > 0 attaches a lease. Below an hour each Put gets its
// own. From an hour up, keys share one lease per (ttl rounded up to the
// minute, wall-clock hour), granted for ttl + 1 h: a key lives between ttl
// and ttl + 1 h 1 min, and a month of audit entries with a 30-day TTL costs
// one lease an hour instead of one per entry.
//
// # Watching without a gap
//
//	rev, err := s.ListRev(ctx, "nodes/", load)
//	for ev := range s.Watch(ctx, "nodes/", rev+1) {
//		if ev.Status() { … } // Broken: changes are late; Resumed: caught up
//		…
//	}
//	// closed while ctx is live: compacted past rev; list again
//
// The etcd client resumes a cut watch by itself, in silence: a Watch
// notices by its own checks (a read every Options.WatchCheck while quiet)
// and says so with Broken and Resumed events.
//
// # Quorum loss and HA
//
// Every request whose ctx has no sooner deadline is bounded by
// Options.RequestTimeout (3 s): a cluster without quorum, or one that
// cannot be reached, fails it with ErrUnavailable ("etcd: no answer within
// 3s: cluster without quorum or unreachable") instead of etcd's own ~7 s or
// the client's wait for a connection. A write that failed so may commit
// later: callers retry idempotently. KeepAliveLease is a lease kept alive
// by this process (replica and session keys); it survives a quorum loss
// shorter than its TTL and closes Lost otherwise. Campaign runs an
// etcd election (concurrency.Election) for singleton work; Leadership.Done
// closes when its session's lease is lost. The etcdtest package runs a
// real multi-member cluster as processes for the tests of all this.
//
// # Tests of other packages
//
// Start one embedded Store per test binary (TestMain, a short dir from
// os.MkdirTemp("", …): unix socket paths are limited to 108 bytes) and give
// each test its own Store opened with Endpoints: []string{shared.Endpoint()}
// and a Prefix of its own. Opening such a Store costs milliseconds instead of
// a member start.
package etcdstore
