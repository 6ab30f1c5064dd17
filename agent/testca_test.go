package agent

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/paths"
)

// testCA is a two-tier CA like the director's, for tests that need
// certificates but no director.
type testCA struct {
	root, inter       *x509.Certificate
	rootKey, interKey *ecdsa.PrivateKey
}

var (
	serialMu sync.Mutex
	serialN  int64
)

func nextSerial() *big.Int {
	serialMu.Lock()
	defer serialMu.Unlock()
	serialN++
	return big.NewInt(1000 + serialN)
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	now := time.Now()
	rk, _ := enroll.NewKey()
	rt := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * 365 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	root := mustCert(t, rt, rt, &rk.PublicKey, rk)
	ik, _ := enroll.NewKey()
	it := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: "test intermediate"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * 365 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	inter := mustCert(t, it, root, &ik.PublicKey, rk)
	return &testCA{root: root, inter: inter, rootKey: rk, interKey: ik}
}

func mustCert(t *testing.T, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	c, err := makeCert(tmpl, parent, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func makeCert(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// node signs a node certificate for pub, valid from nb to na.
func (ca *testCA) node(t *testing.T, pub *ecdsa.PublicKey, nodeID string, nb, na time.Time) *x509.Certificate {
	t.Helper()
	c, err := ca.signNode(pub, nodeID, nb, na)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (ca *testCA) signNode(pub *ecdsa.PublicKey, nodeID string, nb, na time.Time) (*x509.Certificate, error) {
	u, _ := url.Parse(enroll.NodeURI(nodeID))
	return makeCert(&x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: nodeID},
		NotBefore: nb, NotAfter: na, URIs: []*url.URL{u}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca.inter, pub, ca.interKey)
}

// serving is a TLS certificate for 127.0.0.1 with the chain [leaf,
// intermediate, root], as the director serves it.
func (ca *testCA) serving(t *testing.T) tls.Certificate {
	t.Helper()
	k, _ := enroll.NewKey()
	now := time.Now()
	leaf := mustCert(t, &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: "director"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca.inter, &k.PublicKey, ca.interKey)
	return tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.inter.Raw, ca.root.Raw}, PrivateKey: k, Leaf: leaf}
}

const testNodeID = "0f1e2d3c-4b5a-4697-8877-665544332211"

// enrolled writes the credentials of a host enrolled with ca as
// testNodeID, its certificate valid from nb to na; it returns the key.
func enrolled(t *testing.T, l paths.Layout, ca *testCA, nb, na time.Time) *ecdsa.PrivateKey {
	t.Helper()
	key, _ := enroll.NewKey()
	leaf := ca.node(t, &key.PublicKey, testNodeID, nb, na)
	cfg := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Director: "127.0.0.1:9443", Pin: enroll.SPKIPin(ca.root), NodeID: testNodeID}
	if err := ensureDir(l); err != nil {
		t.Fatal(err)
	}
	if err := storeEnrolment(l, cfg, key, leaf, []*x509.Certificate{ca.inter}, ca.root); err != nil {
		t.Fatal(err)
	}
	return key
}
