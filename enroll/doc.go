// Package enroll holds what the node agent and the director must agree on
// to enrol a host: the join string (vcj1:<id>.<secret>@<host>:<port>#sha256:<pin>)
// and its token, the secret's hash, the pin of the director's CA and the
// TLS check that trusts only the pinned chain, the node identity in a
// certificate (URI SAN urn:uuid:<node id>), the node's P-256 key and CSR,
// and the certificate profile (lifetime, backdate, renewal window).
//
// It is small and depends on the standard library only: the agent (in
// the virt binary) and the director both import it, and it imports
// nothing of the host core. It does no I/O beyond crypto/rand.
//
// The token secret is the one credential here that grants something: a
// Join prints it only through Secret and Format; String, GoString, %v and
// slog mask it, and no error of this package contains it.
package enroll
