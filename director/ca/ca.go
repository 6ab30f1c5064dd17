package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/virtcon/virtcon/enroll"
)

var (
	// ErrSealed: a sealed private key did not open under the KEK given:
	// the KEK is the wrong one, or the blob was altered or swapped.
	ErrSealed = errors.New("sealed key does not open under this key encryption key (wrong KEK, or the blob was altered or swapped)")
	// ErrCannotSign: the Authority was opened without a KEK.
	ErrCannotSign = errors.New("this director has no key encryption key: it can verify but not sign")
)

const (
	rootLife  = 10 // years
	interLife = 5  // years
)

// Sealed is what the director keeps in etcd: the certificates in DER, the
// private keys only sealed under the KEK (nonce || AES-256-GCM ciphertext
// of the PKCS #8 DER; AAD "virtcon-director/v1 <name> <hex sha256 of the
// certificate DER>", name "root" or "intermediate").
type Sealed struct {
	RootCert, IntermediateCert []byte
	RootKey, IntermediateKey   []byte
}

// Authority is an opened CA. Its methods are safe for concurrent use.
type Authority struct {
	root, inter       *x509.Certificate
	rootDER, interDER []byte
	// interKey is nil when opened without a KEK. The root key is never
	// held: it stays sealed.
	interKey *ecdsa.PrivateKey
}

// Create makes a new root and intermediate, valid from now-enroll.Backdate,
// and returns the Authority with the Sealed form to store.
func Create(now time.Time, kek []byte) (*Authority, Sealed, error) {
	// The root key signs nothing after the intermediate: it is dropped
	// here and exists from now on only sealed.
	a, s, _, err := create(now, kek)
	return a, s, err
}

// create is Create, also returning the root key for the tests that look
// for it in the Sealed.
func create(now time.Time, kek []byte) (*Authority, Sealed, *ecdsa.PrivateKey, error) {
	if err := checkKEK(kek); err != nil {
		return nil, Sealed{}, nil, err
	}
	var tag [4]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return nil, Sealed{}, nil, fmt.Errorf("ca: create: %w", err)
	}
	id := hex.EncodeToString(tag[:])
	nb := now.Add(-enroll.Backdate)

	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, Sealed{}, nil, fmt.Errorf("ca: create root key: %w", err)
	}
	rootSerial, err := newSerial()
	if err != nil {
		return nil, Sealed{}, rootKey, err
	}
	rootTmpl := &x509.Certificate{
		SerialNumber:          rootSerial,
		Subject:               pkix.Name{CommonName: "virtcon director root CA " + id},
		NotBefore:             nb,
		NotAfter:              now.AddDate(rootLife, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, Sealed{}, rootKey, fmt.Errorf("ca: create root certificate: %w", err)
	}
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		return nil, Sealed{}, rootKey, fmt.Errorf("ca: create root certificate: %w", err)
	}

	interKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, Sealed{}, rootKey, fmt.Errorf("ca: create intermediate key: %w", err)
	}
	interSerial, err := newSerial()
	if err != nil {
		return nil, Sealed{}, rootKey, err
	}
	interTmpl := &x509.Certificate{
		SerialNumber:          interSerial,
		Subject:               pkix.Name{CommonName: "virtcon director signing CA " + id},
		NotBefore:             nb,
		NotAfter:              now.AddDate(interLife, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, root, &interKey.PublicKey, rootKey)
	if err != nil {
		return nil, Sealed{}, rootKey, fmt.Errorf("ca: create intermediate certificate: %w", err)
	}

	s := Sealed{RootCert: rootDER, IntermediateCert: interDER}
	for _, k := range []struct {
		name string
		key  *ecdsa.PrivateKey
		cert []byte
		dst  *[]byte
	}{
		{nameRoot, rootKey, rootDER, &s.RootKey},
		{nameInter, interKey, interDER, &s.IntermediateKey},
	} {
		plain, err := x509.MarshalPKCS8PrivateKey(k.key)
		if err != nil {
			return nil, Sealed{}, rootKey, fmt.Errorf("ca: create: marshal %s key: %w", k.name, err)
		}
		*k.dst, err = seal(kek, k.name, k.cert, plain)
		zero(plain)
		if err != nil {
			return nil, Sealed{}, rootKey, err
		}
	}
	// Open what was just sealed: the Authority returned is exactly what
	// a later Open of s will give.
	a, err := Open(s, kek)
	if err != nil {
		return nil, Sealed{}, rootKey, fmt.Errorf("ca: create: reopen: %w", err)
	}
	return a, s, rootKey, nil
}

// Open checks s and returns its Authority. The intermediate must be a CA
// of path length 0 signed by the root, the root a self-signed CA, both
// P-256. With a KEK, the intermediate's key is unsealed (and must match
// its certificate) and the root's blob is authenticated, so that a wrong
// KEK or a damaged blob shows now rather than on the day the root key is
// needed; the root's plaintext is wiped at once. A wrong KEK or an altered
// or swapped blob is an error wrapping ErrSealed that names the key. With
// kek nil the blobs are not read and the Authority cannot sign.
func Open(s Sealed, kek []byte) (*Authority, error) {
	if kek != nil {
		if err := checkKEK(kek); err != nil {
			return nil, err
		}
	}
	root, err := parseCA(nameRoot, s.RootCert)
	if err != nil {
		return nil, err
	}
	if root.MaxPathLen != 1 {
		return nil, fmt.Errorf("ca: root certificate: path length %d, want 1", root.MaxPathLen)
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("ca: root certificate is not self-signed: %w", err)
	}
	inter, err := parseCA(nameInter, s.IntermediateCert)
	if err != nil {
		return nil, err
	}
	if inter.MaxPathLen != 0 || !inter.MaxPathLenZero {
		return nil, fmt.Errorf("ca: intermediate certificate: path length %d, want 0", inter.MaxPathLen)
	}
	if err := inter.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("ca: intermediate certificate %q is not signed by root %q: %w",
			inter.Subject.CommonName, root.Subject.CommonName, err)
	}
	a := &Authority{root: root, inter: inter, rootDER: root.Raw, interDER: inter.Raw}
	if kek == nil {
		return a, nil
	}

	plain, err := unseal(kek, nameRoot, s.RootCert, s.RootKey)
	if err != nil {
		return nil, err
	}
	zero(plain)

	plain, err = unseal(kek, nameInter, s.IntermediateCert, s.IntermediateKey)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(plain)
	zero(plain)
	if err != nil {
		return nil, fmt.Errorf("ca: intermediate key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ca: intermediate key: %T, want an ECDSA P-256 key", k)
	}
	if pub, ok := inter.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("ca: intermediate key does not match the intermediate certificate")
	}
	a.interKey = key
	return a, nil
}

func parseCA(name string, der []byte) (*x509.Certificate, error) {
	if len(der) == 0 {
		return nil, fmt.Errorf("ca: %s certificate: missing", name)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: %s certificate: %w", name, err)
	}
	if !c.BasicConstraintsValid || !c.IsCA {
		return nil, fmt.Errorf("ca: %s certificate %q is not a CA", name, c.Subject.CommonName)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("ca: %s certificate %q may not sign certificates (key usage)", name, c.Subject.CommonName)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ca: %s certificate %q: key %T, want ECDSA P-256", name, c.Subject.CommonName, c.PublicKey)
	}
	return c, nil
}

// newSerial returns a random 128-bit serial with its top bit set, so that
// every serial this package makes is positive and exactly 32 hex digits.
func newSerial() (*big.Int, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("ca: serial: %w", err)
	}
	b[0] |= 0x80
	return new(big.Int).SetBytes(b[:]), nil
}

// CanSign reports whether a holds the intermediate's key.
func (a *Authority) CanSign() bool { return a.interKey != nil }

// Root is the root CA certificate.
func (a *Authority) Root() *x509.Certificate { return a.root }

// Intermediate is the signing CA certificate.
func (a *Authority) Intermediate() *x509.Certificate { return a.inter }

// Chain is [intermediate DER, root DER], as handed to an enrolled node.
func (a *Authority) Chain() [][]byte {
	return [][]byte{append([]byte(nil), a.interDER...), append([]byte(nil), a.rootDER...)}
}

// Pin is the root's SPKI pin, the one join strings carry.
func (a *Authority) Pin() string { return enroll.SPKIPin(a.root) }

// ClientCAs is a fresh pool holding the root only, for tls.Config.ClientCAs
// (nodes send the intermediate with their leaf).
func (a *Authority) ClientCAs() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.root)
	return p
}

// Serial is the lowercase hex of cert's serial number, the form SignNode
// returns.
func Serial(cert *x509.Certificate) string {
	if cert == nil || cert.SerialNumber == nil {
		return ""
	}
	return cert.SerialNumber.Text(16)
}
