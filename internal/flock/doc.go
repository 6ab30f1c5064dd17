// Package flock serialises virtcon processes on one host with flock(2)
// locks on files under the runtime directory. A lock dies with its
// process, so a killed `virt` never leaves a VM locked.
//
// It owns the locking only: which file guards what is its callers'
// choice, and it never removes a lock file another process may hold.
package flock
