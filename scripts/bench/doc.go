// Command bench times virtcon's commands as whole processes against the
// baselines named in the issues, measured in the same run, and prints
// medians and ratios. Run it with `make bench`.
//
// It measures only: its VMs and libvirt domains live under temp roots it
// makes and removes (an interrupted run too), and nothing in the module
// imports it.
package main
