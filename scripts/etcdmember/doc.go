// Command etcdmember is the real etcd server (go.etcd.io/etcd/server/v3's
// etcdmain, at the version go.mod has), built by director/etcdstore/etcdtest
// and scripts/dirload to run a cluster of member processes. A script, not
// the core: etcdmain links cobra. Debian's etcd (3.4) is too old for our
// client. Not installed, not shipped.
package main
