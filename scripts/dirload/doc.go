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
package main
