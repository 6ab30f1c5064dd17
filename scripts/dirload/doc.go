// Command dirload measures a director under simulated agents (make
// bench): it starts bin/virt-director on loopback in a temporary data
// dir, makes one token per agent over the admin socket, times the
// enrolments (16 in flight), then holds one mTLS session per agent at a
// heartbeat period and samples the director's own CPU time and RSS from
// /proc. With -mode dispatch (or all, the default) it then runs tasks
// through the admin socket (2000 start-vm tasks, 4 in flight, over the
// agents, which answer Queued then Succeeded): the latency from CreateTask
// to the agent's first status seen on WatchTask, p50 and p99, beside the
// director's own dispatch_us. Figures are printed against the targets and
// against the seed platform's limit of about 50 nodes per cluster.
//
// Three more modes, each bounded in time, loopback only, each printing
// the load average beside its figure (the machine may be shared):
//
//   - resync: 1000 agents x 50 synthetic VMs (-n, -vms) on one director
//     with its embedded etcd; once ListVMs counts them all (and
//     recovery.json names every node) the director is killed -9, its
//     <data>/etcd removed and it is started again on the same data dir and
//     port; the agents reconnect by themselves and answer the Resync.
//     Figure: the restart to the count back at 50,000 (target < 30 s).
//   - failover: a 3-member etcd cluster of member processes (built from
//     scripts/etcdmember with go build, or -etcd), two
//     replicas sharing one --ca-kek-file, 1000 agents rotating between
//     them as the agent does (loadgen Options.Addrs); kill -9 of the
//     replica holding about half. Figure: p50/p99 of the kill to each of
//     its agents' Registered on the other (target p99 < 15 s).
//   - scale: -scale-n agents (10,000) at 10 s heartbeats over the same
//     two replicas, RLIMIT_NOFILE raised to its hard limit. Figure: each
//     replica's CPU (utime+stime from /proc over -duration) and RSS
//     (target < 15 % of a core each).
package main
