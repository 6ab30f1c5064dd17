// Command etcd is the real etcd server (go.etcd.io/etcd/server/v3's
// etcdmain, at the version go.mod has), built by etcdtest for tests that
// run a cluster of member processes. Debian's etcd (3.4) is too old for
// our client. Not installed, not shipped.
package main
