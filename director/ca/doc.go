// Package ca is the director's certificate authority: a root CA (P-256,
// 10 years, path length 1) and a signing intermediate under it (P-256,
// 5 years, path length 0) that issues node client certificates and the
// director's own TLS serving certificate, and verifies the client chains
// nodes present.
//
// Keys at rest: Create hands back a Sealed with the two certificates in DER
// and the two private keys sealed with AES-256-GCM under a 32-byte key
// encryption key (KEK). The director keeps the Sealed in etcd; the KEK
// never goes into etcd — it lives in a file of its own (LoadOrCreateKEK,
// mode 0600), so a copy of the etcd data (a backup, a snapshot, a member's
// disk) holds no usable CA key. Each sealed blob is bound by its AAD to its
// key's name and to its certificate, so a blob cannot be swapped between
// the two keys or between two CAs.
//
// Lose the KEK and the CA can sign nothing again: every node must re-enrol
// against a new CA (their certificates still verify until they expire, but
// none can be renewed). Back the KEK file up, apart from the etcd backups.
//
// Only the intermediate's key is ever unsealed into memory; the root's
// blob is authenticated by Open and its plaintext dropped at once. An
// Authority opened without a KEK verifies but cannot sign (a replica that
// serves sessions but not enrolment).
//
// The package uses only the standard library's crypto and knows nothing of
// etcd, the network or the host core; enroll supplies the shared profile
// (node URI SAN, backdating, pins).
package ca
