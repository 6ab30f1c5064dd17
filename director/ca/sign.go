package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/virtcon/virtcon/enroll"
)

// ServingLifetime is how long a serving certificate from ServingCert is
// valid.
const ServingLifetime = 90 * 24 * time.Hour

// SignNode issues a node's client certificate for the key in csr: CN and
// the one URI SAN (enroll.NodeURI) name nodeID, ClientAuth only, valid
// from now-enroll.Backdate to now+life (never past the intermediate's own
// NotAfter: the returned notAfter is the one in the certificate), with a
// random 128-bit serial. Nothing else from the CSR is copied. The caller
// has checked the CSR's key (ECDSA P-256); SignNode checks it again with
// its signature, since a certificate is the one thing it cannot take back.
func (a *Authority) SignNode(csr *x509.CertificateRequest, nodeID string, now time.Time, life time.Duration) (der []byte, serial string, notAfter time.Time, err error) {
	if !a.CanSign() {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: %w", nodeID, ErrCannotSign)
	}
	if !enroll.ValidNodeID(nodeID) {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: node id is not a lowercase uuid", nodeID)
	}
	if life <= 0 {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: lifetime %v, want > 0", nodeID, life)
	}
	if csr == nil {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: no certificate request", nodeID)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: certificate request: %w", nodeID, err)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: certificate request key %T, want ECDSA P-256", nodeID, csr.PublicKey)
	}
	u, err := url.Parse(enroll.NodeURI(nodeID))
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: %w", nodeID, err)
	}
	sn, err := newSerial()
	if err != nil {
		return nil, "", time.Time{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: nodeID},
		NotBefore:             now.Add(-enroll.Backdate),
		NotAfter:              a.capLife(now.Add(life)),
		URIs:                  []*url.URL{u},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, a.inter, pub, a.interKey)
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: %w", nodeID, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("ca: sign node %q: %w", nodeID, err)
	}
	return der, Serial(cert), cert.NotAfter, nil
}

// capLife keeps a leaf from outliving the intermediate that signs it: it
// would stop verifying at the intermediate's end anyway.
func (a *Authority) capLife(t time.Time) time.Time {
	if t.After(a.inter.NotAfter) {
		return a.inter.NotAfter
	}
	return t
}

// ServingCert makes the director's TLS server certificate on a new P-256
// key: the DNS names and IP addresses in names (an IPv6 address may come
// in brackets) plus localhost, 127.0.0.1 and ::1, ServerAuth, valid from
// now-enroll.Backdate for ServingLifetime, signed by the intermediate.
// Its chain is [leaf, intermediate, root]: the root is sent on purpose,
// since agents check it against their pin.
func (a *Authority) ServingCert(names []string, now time.Time) (*tls.Certificate, error) {
	if !a.CanSign() {
		return nil, fmt.Errorf("ca: serving certificate: %w", ErrCannotSign)
	}
	dns, ips, err := splitNames(append(append([]string(nil), names...), "localhost", "127.0.0.1", "::1"))
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	sn, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: dns[0]},
		NotBefore:             now.Add(-enroll.Backdate),
		NotAfter:              a.capLife(now.Add(ServingLifetime)),
		DNSNames:              dns,
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.inter, &key.PublicKey, a.interKey)
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, a.interDER, a.rootDER},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// splitNames sorts names into DNS names and IP addresses, dropping empty
// entries and duplicates, keeping the first-seen order.
func splitNames(names []string) ([]string, []net.IP, error) {
	var dns []string
	var ips []net.IP
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(n, "["), "]")); ip != nil {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !seen["ip "+ip.String()] {
				seen["ip "+ip.String()] = true
				ips = append(ips, ip)
			}
			continue
		}
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if !validDNSName(n) {
			return nil, nil, fmt.Errorf("name %q: not a DNS name or an IP address", n)
		}
		if !seen["dns "+n] {
			seen["dns "+n] = true
			dns = append(dns, n)
		}
	}
	return dns, ips, nil
}

// validDNSName accepts letters, digits, '-' and '_' in dot-separated
// labels of 1–63 characters (a leading "*." too), at most 253 in all: what
// a certificate's dNSName may carry. It turns away a "host:port" or a URL
// given by mistake.
func validDNSName(n string) bool {
	n = strings.TrimPrefix(n, "*.")
	if n == "" || len(n) > 253 {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// VerifyNode checks a client chain as presented (leaf first) against the
// root at time now, for ClientAuth, with this CA's own intermediate (the
// other certificates presented are not trusted as intermediates), and
// returns the node id from the leaf's URI SAN. An expired or not yet valid
// certificate is an error wrapping an x509.CertificateInvalidError with
// Reason x509.Expired (errors.As). Revocation is the caller's to check,
// by Serial.
func (a *Authority) VerifyNode(chain []*x509.Certificate, now time.Time) (string, error) {
	if len(chain) == 0 || chain[0] == nil {
		return "", errors.New("ca: verify node: no client certificate")
	}
	leaf := chain[0]
	if leaf.IsCA {
		return "", fmt.Errorf("ca: verify node: certificate serial %s is a CA certificate, not a node's", Serial(leaf))
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.root)
	inters := x509.NewCertPool()
	inters.AddCert(a.inter)
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inters,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return "", fmt.Errorf("ca: verify node certificate serial %s: %w", Serial(leaf), err)
	}
	id, err := enroll.NodeIDFromCert(leaf)
	if err != nil {
		return "", fmt.Errorf("ca: verify node: %w", err)
	}
	return id, nil
}
