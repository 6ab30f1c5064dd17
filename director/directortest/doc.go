// Package directortest runs real directors for tests: real TLS 1.3 on
// loopback, real etcd. One embedded etcd member serves the whole test
// binary (started on first use; call Main from TestMain to stop it and
// remove its files at the end), and each director gets its own key
// prefix in it, as an external store, and its own short data directory.
// The director's clock is a Clock the test advances.
//
// Only tests import this package.
package directortest
