package agent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// The files under paths.Layout.AgentDir (0700), each 0600.
const (
	identityFile   = "identity.pem"    // key + leaf + intermediate
	caFile         = "ca.pem"          // the director's root CA
	configFile     = "agent.yaml"      // Config
	pendingKeyFile = "key.pending.pem" // the key of an enrolment under way
	alertFile      = "alert.json"      // under AgentStateDir
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

// IdentityFile is the node's key and certificate chain, the file whose
// presence means "enrolled" (virtcon-agent.service's condition).
func IdentityFile(l paths.Layout) string { return filepath.Join(l.AgentDir(), identityFile) }

// CAFile is the director's root CA the host enrolled with.
func CAFile(l paths.Layout) string { return filepath.Join(l.AgentDir(), caFile) }

// ConfigFile is agent.yaml.
func ConfigFile(l paths.Layout) string { return filepath.Join(l.AgentDir(), configFile) }

// PendingKeyFile is the key of an enrolment whose reply has not been
// stored yet: a retry sends a CSR for the same key and gets the same
// certificate.
func PendingKeyFile(l paths.Layout) string { return filepath.Join(l.AgentDir(), pendingKeyFile) }

// AlertFile is the persistent alert: the credential was revoked or
// expired.
func AlertFile(l paths.Layout) string { return filepath.Join(l.AgentStateDir(), alertFile) }

// identity is the node's credential as loaded from the files.
type identity struct {
	cfg   *Config
	key   *ecdsa.PrivateKey
	leaf  *x509.Certificate
	chain []*x509.Certificate // intermediates, leaf's issuer first
	root  *x509.Certificate
	cert  tls.Certificate // key, leaf and chain, for the TLS client
}

// loadIdentity reads agent.yaml, identity.pem and ca.pem. No identity.pem
// (and no agent.yaml) is ErrNotEnrolled; anything else missing or
// unreadable is an error naming the file.
func loadIdentity(l paths.Layout) (*identity, error) {
	idPath := IdentityFile(l)
	idPEM, err := os.ReadFile(idPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrNotEnrolled, idPath)
	}
	if err != nil {
		return nil, fmt.Errorf("agent identity: %w", err)
	}
	cfg, err := loadConfig(l)
	if err != nil {
		return nil, err
	}
	key, certs, err := parseIdentity(idPEM)
	if err != nil {
		return nil, fmt.Errorf("agent identity %s: %w", idPath, err)
	}
	caPath := CAFile(l)
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("agent CA: %w", err)
	}
	root, err := parseOneCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("agent CA %s: %w", caPath, err)
	}
	id := &identity{cfg: cfg, key: key, leaf: certs[0], chain: certs[1:], root: root}
	id.cert = tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		id.cert.Certificate = append(id.cert.Certificate, c.Raw)
	}
	return id, nil
}

func loadConfig(l paths.Layout) (*Config, error) {
	path := ConfigFile(l)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	c, err := DecodeConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// parseIdentity reads identity.pem: one PRIVATE KEY, then the leaf and its
// chain as CERTIFICATE blocks. Its errors never quote the key.
func parseIdentity(b []byte) (*ecdsa.PrivateKey, []*x509.Certificate, error) {
	var key *ecdsa.PrivateKey
	var certs []*x509.Certificate
	for len(bytes.TrimSpace(b)) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, nil, errors.New("not PEM after the last block")
		}
		switch blk.Type {
		case "PRIVATE KEY":
			if key != nil {
				return nil, nil, errors.New("two private keys")
			}
			k, err := enroll.ParseKey(pem.EncodeToMemory(blk))
			if err != nil {
				return nil, nil, err
			}
			key = k
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
			}
			certs = append(certs, c)
		default:
			return nil, nil, fmt.Errorf("unexpected PEM block %q", blk.Type)
		}
	}
	switch {
	case key == nil:
		return nil, nil, errors.New("no private key")
	case len(certs) == 0:
		return nil, nil, errors.New("no certificate")
	case !samePublicKey(certs[0], key):
		return nil, nil, errors.New("the certificate is not for the key")
	}
	return key, certs, nil
}

func parseOneCert(b []byte) (*x509.Certificate, error) {
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("want one PEM CERTIFICATE")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("more than one PEM block")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func samePublicKey(c *x509.Certificate, key *ecdsa.PrivateKey) bool {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && pub.Equal(&key.PublicKey)
}

func certPEM(certs ...*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return b
}

// ensureDir makes AgentDir 0700, and makes it 0700 again if it is not.
func ensureDir(l paths.Layout) error {
	dir := l.AgentDir()
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("agent credentials: %w", err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("agent credentials: %w", err)
	}
	return nil
}

// writeIdentity replaces identity.pem with key, leaf and chain in one
// atomic write: a reader sees the old pair or the new one, never a key
// with another's certificate.
func writeIdentity(l paths.Layout, key *ecdsa.PrivateKey, leaf *x509.Certificate, chain []*x509.Certificate) error {
	kp, err := enroll.MarshalKey(key)
	if err != nil {
		return err
	}
	data := append(kp, certPEM(append([]*x509.Certificate{leaf}, chain...)...)...)
	if err := atomicfile.Write(IdentityFile(l), data, fileMode); err != nil {
		return fmt.Errorf("agent identity: %w", err)
	}
	return nil
}

// loadPendingKey returns the key of an unfinished enrolment, nil when
// there is none. One that cannot be read is an error: it is left for the
// admin to look at, not overwritten.
func loadPendingKey(l paths.Layout) (*ecdsa.PrivateKey, error) {
	path := PendingKeyFile(l)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pending agent key: %w", err)
	}
	k, err := enroll.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("pending agent key %s: %w (remove it to enrol with a new key)", path, err)
	}
	return k, nil
}

func writePendingKey(l paths.Layout, key *ecdsa.PrivateKey) error {
	b, err := enroll.MarshalKey(key)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(PendingKeyFile(l), b, fileMode); err != nil {
		return fmt.Errorf("pending agent key: %w", err)
	}
	return nil
}

// removeCredentials deletes the credentials, identity.pem first (it is
// what says "enrolled"), and the alert. The directory stays.
func removeCredentials(l paths.Layout) error {
	var errs []error
	for _, p := range []string{IdentityFile(l), PendingKeyFile(l), CAFile(l), ConfigFile(l), AlertFile(l)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
