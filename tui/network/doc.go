// Package network is the DCUI's Network screen: the management interface
// and bridges as network.yaml wants them beside what the host has, edit
// forms for them, the review of a change (field diff and plan steps), the
// trial apply with its "keep these settings?" countdown, "test management
// network" and "reset management network to DHCP on NIC X".
//
// It owns the screen's layout, forms and dialogs only. Every rule about
// the network file (admission, the desired and pending files, try, confirm,
// rollback, the management tests) is netcfg's, reached through Sources in a
// tea.Cmd: Update never blocks and tests run on fakes. It never changes
// the host unless the console holds the writer lock.
//
// The screen (Model) is composed of one part per mode, each with its own
// keys, legend, CLI line and view (part.go): the overview, the edit form,
// the review, the trial apply, the keep dialog, the NIC picker, the delete
// dialog and the test results. A part reads what the screen loaded and
// answers keys; what needs the rest of the screen (another mode, a host
// call) it returns as an intent that the screen carries out at once.
package network
