// Package paths derives every file-system location virtcon owns from one
// configurable root, so that tests and relocated installs never touch the
// real /etc, /var or /run.
//
// It only computes paths: it never creates, reads or removes a file.
package paths
