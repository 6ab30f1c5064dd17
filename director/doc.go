// Package director is the reference director a virtcon host enrols into:
// one-time join tokens traded for per-node mTLS certificates, the agents'
// live sessions, liveness (Ready, Degraded, Offline) on the director's own
// clock, revocation checked on every request, and an audit trail. Its
// durable state lives in etcd (package etcdstore: an embedded member by
// default, an external cluster on request), its CA in package ca.
//
// It owns these keys under the store's prefix:
//
//	config/advertise     the host:port join strings name
//	ca/sealed            the CA's certificates and its sealed keys (created once)
//	tokens/<id>          a join token: the secret's SHA-256, expiry, uses
//	nodes/<node>         an enrolled node: facts, capabilities, its serials
//	certs/<serial>       an issued certificate (DER), until it expires
//	revoked/<serial>     a revoked serial, until its certificate expires
//	nodestate/<node>     the node's liveness state, written on transitions only
//	reports/<node>       the node's last VM list, written when it changes
//	audit/<time>-<rand>  an audit entry, kept for Options.AuditRetention
//	tasks/<node>/<task>       a task as created (a create-vm's manifest dropped once it ended)
//	taskstatus/<node>/<task>  its phase and the agent's last status, log tail
//	taskids/<task>            which node a task is for
//	taskdata/<node>/<task>/<offset>  a diagnostics bundle's chunks, 24 h
//	inventory/<node>     the node's VMs as its agent last said (full + deltas)
//	resync/<node>        an admin's request for a full inventory, 1 h
//	replicas/<id>        a live replica: advertise, version, start (on its lease)
//	sessions/<node>      the replica holding the node's session (on that lease)
//	election/singletons/ the leader's election (concurrency.Election)
//
// Replicas (ha.go): each keeps a lease of its own for its replicas/ and
// sessions/ keys; the holder of a node's session judges its liveness, the
// elected leader judges the nodes nobody holds and runs the singletons
// (the task sweeper, the token expiry audit).
//
// A task stored through any replica reaches the node through the replica
// holding its session (a tasks/ watch; held is the one routing point).
// What agents send is written by one writer per session, never on the
// goroutine that answers heartbeats.
//
// Heartbeats stay in memory: silence is judged on the director's clock,
// never on the agent's, and a silent node's VMs show as "unknown (last
// seen <phase> at <time>)", never as stopped: the director never assumes
// a VM dead, and nothing it does on its own stops one (only a task an
// admin asked for changes a host).
//
// The director never imports the host core (host, vm, netcfg, hostinfo,
// auth, ...): it knows hosts only through the API in api/directorv1.
// Token secrets and private keys never reach a log, an audit entry or an
// error: no handler logs a request message.
package director
