// Package buildinfo carries the version stamped in at link time.
//
// It only reports (the version, the commit, the Go version); it reads
// nothing from the host.
package buildinfo
