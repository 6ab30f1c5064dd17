// Package etcdtest runs a real etcd cluster as member processes for tests:
// the etcd server code our module links (scripts/etcdmember, etcdmain at go.mod's
// version), built once per test binary, with members on loopback ports and
// data in temporary directories. Tests kill members with SIGKILL and
// restart them to see what quorum loss and leader changes do to the
// director. Test helper only: no program links it (host/layering_test.go).
//
// Peers speak plain HTTP on 127.0.0.1: tests only. A real cluster uses TLS
// peers (docs/director.md).
package etcdtest
