package enroll

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNoPin: the join string has no #sha256: pin, so the director
	// cannot be told from an impostor.
	ErrNoPin = errors.New("join string has no pin (#sha256:…) to check the director against")
	// ErrPinMismatch: no certificate the director presented has the
	// pinned public key.
	ErrPinMismatch = errors.New("director certificate does not match the pin")
)

// SPKIPin is "sha256:" and the lowercase hex SHA-256 of the certificate's
// SubjectPublicKeyInfo: the pin a join string carries for the root CA. It
// names the key, so a root re-issued over the same key keeps its pin.
func SPKIPin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return pinPrefix + hex.EncodeToString(sum[:])
}

// VerifyPinned returns a tls.Config.VerifyConnection for a client that
// sets InsecureSkipVerify: the system roots play no part, the pin is the
// only trust anchor. Among the certificates the server presented (it must
// send its root with the chain) it takes the one whose SPKIPin is pin as
// the only root, the others as intermediates, and verifies the leaf for
// server authentication and for serverName (a DNS name or an IP address:
// the Join's Host). A chain that merely includes a copy of the pinned
// root but is not signed by it fails that verification.
func VerifyPinned(pin, serverName string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if pin == "" {
			return ErrNoPin
		}
		if serverName == "" {
			return errors.New("verify director certificate: no server name to check it for")
		}
		certs := cs.PeerCertificates
		if len(certs) == 0 {
			return errors.New("verify director certificate: the director presented none")
		}
		anchor := -1
		seen := make([]string, len(certs))
		for i, c := range certs {
			seen[i] = SPKIPin(c)
			if seen[i] == pin && anchor < 0 {
				anchor = i
			}
		}
		if anchor < 0 {
			return fmt.Errorf("verify director certificate: want pin %s, the director presented %s: %w",
				pin, strings.Join(seen, ", "), ErrPinMismatch)
		}
		roots := x509.NewCertPool()
		roots.AddCert(certs[anchor])
		inter := x509.NewCertPool()
		for i, c := range certs[1:] {
			if i+1 != anchor {
				inter.AddCert(c)
			}
		}
		_, err := certs[0].Verify(x509.VerifyOptions{
			DNSName:       serverName,
			Roots:         roots,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("verify director certificate for %q against pin %s: %w", serverName, pin, err)
		}
		return nil
	}
}
