package enroll

import (
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"strings"
)

const nodeURIPrefix = "urn:uuid:"

// NodeURI is the URI SAN that names a node in its certificate.
func NodeURI(nodeID string) string { return nodeURIPrefix + nodeID }

// NewNodeID makes a random (version 4) UUID in lowercase, the form
// NodeIDFromCert accepts.
func NewNodeID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new node id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// NodeIDFromCert reads the node id from a node certificate: it must have
// exactly one URI SAN, urn:uuid:<uuid> with the UUID in lowercase
// canonical form. The CN is a hint and is never read.
func NodeIDFromCert(cert *x509.Certificate) (string, error) {
	if len(cert.URIs) != 1 {
		return "", fmt.Errorf("node certificate serial %s: want exactly one URI SAN %s<node id>, got %d", serial(cert), nodeURIPrefix, len(cert.URIs))
	}
	u := cert.URIs[0].String()
	id, ok := strings.CutPrefix(u, nodeURIPrefix)
	if !ok || !ValidNodeID(id) {
		return "", fmt.Errorf("node certificate serial %s: URI SAN %q: want %s<lowercase uuid>", serial(cert), u, nodeURIPrefix)
	}
	return id, nil
}

func serial(cert *x509.Certificate) string {
	if cert.SerialNumber == nil {
		return "?"
	}
	return cert.SerialNumber.Text(16)
}

// ValidNodeID reports whether id is a UUID in lowercase canonical form
// (8-4-4-4-12 hex digits).
func ValidNodeID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
