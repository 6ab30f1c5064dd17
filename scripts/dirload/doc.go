// Command dirload measures a director under simulated agents (make
// bench): it starts bin/virt-director on loopback in a temporary data
// dir, makes one token per agent over the admin socket, times the
// enrolments (16 in flight), then holds one mTLS session per agent at a
// heartbeat period and samples the director's own CPU time and RSS from
// /proc. Figures are printed against the targets and against the seed
// platform's limit of about 50 nodes per cluster.
package main
