// Package taskkind names the director's task kinds as the command line
// spells them (create-vm, start-vm, ...): the one list the agent (what it
// advertises and runs), the director (what it accepts and shows) and
// virt-director task run share.
package taskkind
