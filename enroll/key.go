package enroll

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
)

// ErrBadCSR is wrapped by every error about a refused CSR.
var ErrBadCSR = errors.New("bad certificate request")

const pemKeyType = "PRIVATE KEY"

// NewKey makes a node's ECDSA P-256 key.
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new key: %w", err)
	}
	return k, nil
}

// NewCSR makes a DER certificate request signed by key. Its CN is the
// hostname, a hint for humans only: the director decides the node's
// identity and puts it in the certificate it issues.
func NewCSR(key *ecdsa.PrivateKey, hostname string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: hostname},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("new certificate request: %w", err)
	}
	return der, nil
}

// ParseCSR parses a DER certificate request and accepts it only when its
// signature holds (the sender has the key) and the key is ECDSA P-256.
func ParseCSR(der []byte) (*x509.CertificateRequest, error) {
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature: %w", ErrBadCSR, err)
	}
	if err := checkP256(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCSR, err)
	}
	return csr, nil
}

func checkP256(pub any) error {
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("key is %T, want ECDSA P-256", pub)
	}
	if k.Curve != elliptic.P256() {
		return fmt.Errorf("key is ECDSA %s, want P-256", k.Curve.Params().Name)
	}
	return nil
}

// MarshalKey encodes key as PEM "PRIVATE KEY" (PKCS #8). The result is a
// secret: write it 0600.
func MarshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemKeyType, Bytes: der}), nil
}

// ParseKey decodes what MarshalKey wrote: one PEM "PRIVATE KEY" block
// holding an ECDSA P-256 key. Its errors never quote the key.
func ParseKey(pemBytes []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		return nil, errors.New("parse key: no PEM block")
	}
	if b.Type != pemKeyType {
		return nil, fmt.Errorf("parse key: PEM block %q, want %q", b.Type, pemKeyType)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse key: key is %T, want ECDSA P-256", k)
	}
	if err := checkP256(&ek.PublicKey); err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	return ek, nil
}
