package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/enroll"
)

const testNode = "0b9d4f5e-3c2a-4e1f-8d7c-6b5a49382716"

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func csrFor(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) *x509.CertificateRequest {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func newCSR(t testing.TB, host string) *x509.CertificateRequest {
	return csrFor(t, newKey(t), &x509.CertificateRequest{Subject: pkix.Name{CommonName: host}})
}

func parse(t testing.TB, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var serialRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestSignNodeProfile(t *testing.T) {
	a, _ := mustCreate(t, testKEK(t))
	// A CSR that asks for more than it gets: none of it may be copied.
	evil, _ := url.Parse("urn:uuid:ffffffff-ffff-4fff-bfff-ffffffffffff")
	csr := csrFor(t, newKey(t), &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: "admin", Organization: []string{"root"}},
		DNSNames:       []string{"director.example"},
		IPAddresses:    []net.IP{net.ParseIP("10.0.0.1")},
		EmailAddresses: []string{"a@example.com"},
		URIs:           []*url.URL{evil},
	})
	life := enroll.CertLifetime
	der, serial, notAfter, err := a.SignNode(csr, testNode, testNow, life)
	if err != nil {
		t.Fatalf("SignNode: %v", err)
	}
	c := parse(t, der)
	if c.Subject.CommonName != testNode || len(c.Subject.Organization) != 0 {
		t.Errorf("subject %q, want CN=%s only", c.Subject, testNode)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != enroll.NodeURI(testNode) {
		t.Errorf("URI SANs %v, want exactly [%s]", c.URIs, enroll.NodeURI(testNode))
	}
	if len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses) != 0 {
		t.Errorf("other SANs copied from the CSR: DNS %v IP %v email %v", c.DNSNames, c.IPAddresses, c.EmailAddresses)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(c.UnknownExtKeyUsage) != 0 {
		t.Errorf("ExtKeyUsage %v, want [ClientAuth]", c.ExtKeyUsage)
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("KeyUsage %v, want DigitalSignature", c.KeyUsage)
	}
	if c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA %v BasicConstraintsValid %v, want a non-CA with basic constraints", c.IsCA, c.BasicConstraintsValid)
	}
	if want := testNow.Add(-enroll.Backdate); !c.NotBefore.Equal(want) {
		t.Errorf("NotBefore %v, want %v (backdated %v)", c.NotBefore, want, enroll.Backdate)
	}
	if want := testNow.Add(life); !c.NotAfter.Equal(want) || !notAfter.Equal(want) {
		t.Errorf("NotAfter %v (returned %v), want %v", c.NotAfter, notAfter, want)
	}
	if serial != Serial(c) || !serialRE.MatchString(serial) {
		t.Errorf("serial %q, Serial(cert) %q; want the same 32 lowercase hex digits", serial, Serial(c))
	}
	if err := c.CheckSignatureFrom(a.Intermediate()); err != nil {
		t.Errorf("not signed by the intermediate: %v", err)
	}
	if !c.PublicKey.(*ecdsa.PublicKey).Equal(csr.PublicKey) {
		t.Error("certificate key is not the CSR's")
	}
	if id, err := a.VerifyNode([]*x509.Certificate{c}, testNow); err != nil || id != testNode {
		t.Errorf("VerifyNode = %q, %v; want %q", id, err, testNode)
	}

	t.Run("serials unique", func(t *testing.T) {
		seen := map[string]bool{}
		for i := range 100 {
			_, s, _, err := a.SignNode(csr, testNode, testNow, life)
			if err != nil {
				t.Fatal(err)
			}
			if !serialRE.MatchString(s) {
				t.Fatalf("signing %d: serial %q, want 32 lowercase hex digits", i, s)
			}
			if seen[s] {
				t.Fatalf("signing %d: serial %s issued twice", i, s)
			}
			seen[s] = true
		}
	})

	t.Run("capped at the intermediate's end", func(t *testing.T) {
		_, _, na, err := a.SignNode(csr, testNode, testNow, 20*365*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !na.Equal(a.Intermediate().NotAfter) {
			t.Errorf("NotAfter %v, want the intermediate's %v", na, a.Intermediate().NotAfter)
		}
	})
}

func TestSignNodeRefuses(t *testing.T) {
	a, _ := mustCreate(t, testKEK(t))
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	badSig := newCSR(t, "h")
	badSig.Signature = append([]byte(nil), badSig.Signature...)
	badSig.Signature[len(badSig.Signature)-1] ^= 0x01
	for _, tc := range []struct {
		name string
		csr  *x509.CertificateRequest
		id   string
		life time.Duration
		want string
	}{
		{"bad csr signature", badSig, testNode, time.Hour, "certificate request"},
		{"ed25519 key", csrFor(t, edKey, &x509.CertificateRequest{}), testNode, time.Hour, "want ECDSA P-256"},
		{"p-384 key", csrFor(t, p384, &x509.CertificateRequest{}), testNode, time.Hour, "want ECDSA P-256"},
		{"nil csr", nil, testNode, time.Hour, "no certificate request"},
		{"node id not a uuid", newCSR(t, "h"), "web-01", time.Hour, "not a lowercase uuid"},
		{"node id upper case", newCSR(t, "h"), strings.ToUpper(testNode), time.Hour, "not a lowercase uuid"},
		{"node id empty", newCSR(t, "h"), "", time.Hour, "not a lowercase uuid"},
		{"zero life", newCSR(t, "h"), testNode, 0, "lifetime 0s"},
		{"negative life", newCSR(t, "h"), testNode, -time.Hour, "lifetime -1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, serial, _, err := a.SignNode(tc.csr, tc.id, testNow, tc.life)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SignNode err %v, want one containing %q", err, tc.want)
			}
			if der != nil || serial != "" {
				t.Errorf("SignNode returned a certificate with its error")
			}
		})
	}
}

func TestCannotSign(t *testing.T) {
	signer, s := mustCreate(t, testKEK(t))
	a, err := Open(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.CanSign() {
		t.Fatal("CanSign true without a KEK")
	}
	if _, _, _, err := a.SignNode(newCSR(t, "h"), testNode, testNow, time.Hour); !errors.Is(err, ErrCannotSign) {
		t.Errorf("SignNode err %v, want ErrCannotSign", err)
	}
	if _, err := a.ServingCert([]string{"d.example"}, testNow); !errors.Is(err, ErrCannotSign) {
		t.Errorf("ServingCert err %v, want ErrCannotSign", err)
	}
	// It still verifies what a signing replica issued.
	der, _, _, err := signer.SignNode(newCSR(t, "h"), testNode, testNow, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.VerifyNode([]*x509.Certificate{parse(t, der)}, testNow); err != nil || id != testNode {
		t.Errorf("VerifyNode = %q, %v; want %q", id, err, testNode)
	}
}

func TestServingCert(t *testing.T) {
	a, _ := mustCreate(t, testKEK(t))
	cert, err := a.ServingCert([]string{"director.example", "10.0.0.5", "[fd00::1]", "Director.Example.", " ", "localhost", "::ffff:10.0.0.5"}, testNow)
	if err != nil {
		t.Fatalf("ServingCert: %v", err)
	}
	leaf := cert.Leaf
	if want := []string{"director.example", "localhost"}; !slices.Equal(leaf.DNSNames, want) {
		t.Errorf("DNS names %v, want %v", leaf.DNSNames, want)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"10.0.0.5", "fd00::1", "127.0.0.1", "::1"}; !slices.Equal(ips, want) {
		t.Errorf("IP addresses %v, want %v", ips, want)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || leaf.IsCA {
		t.Errorf("ExtKeyUsage %v IsCA %v, want [ServerAuth], not a CA", leaf.ExtKeyUsage, leaf.IsCA)
	}
	if !leaf.NotBefore.Equal(testNow.Add(-enroll.Backdate)) || !leaf.NotAfter.Equal(testNow.Add(90*24*time.Hour)) {
		t.Errorf("valid %v to %v, want %v to %v", leaf.NotBefore, leaf.NotAfter, testNow.Add(-enroll.Backdate), testNow.Add(90*24*time.Hour))
	}
	if len(cert.Certificate) != 3 || !parse(t, cert.Certificate[0]).Equal(leaf) ||
		!parse(t, cert.Certificate[1]).Equal(a.Intermediate()) || !parse(t, cert.Certificate[2]).Equal(a.Root()) {
		t.Error("chain is not [leaf, intermediate, root]")
	}
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() || !key.PublicKey.Equal(leaf.PublicKey) {
		t.Errorf("private key %T does not match the leaf or is not P-256", cert.PrivateKey)
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.Root())
	inters := x509.NewCertPool()
	inters.AddCert(a.Intermediate())
	for _, name := range []string{"director.example", "localhost", "10.0.0.5", "fd00::1", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inters, CurrentTime: testNow}); err != nil {
			t.Errorf("verify for %q: %v", name, err)
		}
	}
	if _, err := a.VerifyNode([]*x509.Certificate{leaf}, testNow); err == nil {
		t.Error("VerifyNode accepted the serving certificate as a node's")
	}

	for _, bad := range []string{"director.example:9443", "https://director.example", "a b", "-x.example", "x..example"} {
		if _, err := a.ServingCert([]string{bad}, testNow); err == nil || !strings.Contains(err.Error(), "not a DNS name or an IP address") {
			t.Errorf("ServingCert(%q) err %v, want it refused", bad, err)
		}
	}
}

func TestVerifyNodeRefuses(t *testing.T) {
	a, _ := mustCreate(t, testKEK(t))
	other, _ := mustCreate(t, testKEK(t))
	sign := func(by *Authority, id string) *x509.Certificate {
		der, _, _, err := by.SignNode(newCSR(t, "h"), id, testNow, enroll.CertLifetime)
		if err != nil {
			t.Fatal(err)
		}
		return parse(t, der)
	}
	good := sign(a, testNode)
	// craft signs with the intermediate's key what SignNode never would.
	craft := func(edit func(*x509.Certificate)) *x509.Certificate {
		u, _ := url.Parse(enroll.NodeURI(testNode))
		sn, _ := newSerial()
		tmpl := &x509.Certificate{
			SerialNumber: sn, Subject: pkix.Name{CommonName: testNode}, URIs: []*url.URL{u},
			NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
		}
		edit(tmpl)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Intermediate(), &newKey(t).PublicKey, a.interKey)
		if err != nil {
			t.Fatal(err)
		}
		return parse(t, der)
	}
	if _, err := a.VerifyNode([]*x509.Certificate{craft(func(*x509.Certificate) {})}, testNow); err != nil {
		t.Fatalf("crafted control certificate refused: %v", err)
	}
	var expired x509.CertificateInvalidError
	for _, tc := range []struct {
		name    string
		chain   []*x509.Certificate
		now     time.Time
		expired bool
	}{
		{"no chain", nil, testNow, false},
		{"nil leaf", []*x509.Certificate{nil}, testNow, false},
		{"another CA's node", []*x509.Certificate{sign(other, testNode), other.Intermediate()}, testNow, false},
		{"expired", []*x509.Certificate{good}, testNow.Add(enroll.CertLifetime + time.Second), true},
		{"far ahead", []*x509.Certificate{good}, testNow.AddDate(3, 0, 0), true},
		{"not yet valid", []*x509.Certificate{good}, testNow.Add(-enroll.Backdate - time.Second), true},
		{"the intermediate as leaf", []*x509.Certificate{a.Intermediate()}, testNow, false},
		{"the root as leaf", []*x509.Certificate{a.Root()}, testNow, false},
		{"server auth only", []*x509.Certificate{craft(func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		})}, testNow, false},
		{"a CA with the node's URI", []*x509.Certificate{craft(func(c *x509.Certificate) {
			c.IsCA, c.KeyUsage = true, x509.KeyUsageCertSign
		})}, testNow, false},
		{"two URI SANs", []*x509.Certificate{craft(func(c *x509.Certificate) {
			u, _ := url.Parse(enroll.NodeURI("ffffffff-ffff-4fff-bfff-ffffffffffff"))
			c.URIs = append(c.URIs, u)
		})}, testNow, false},
		{"no URI SAN", []*x509.Certificate{craft(func(c *x509.Certificate) { c.URIs = nil })}, testNow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := a.VerifyNode(tc.chain, tc.now)
			if err == nil {
				t.Fatalf("VerifyNode accepted it as node %q", id)
			}
			if got := errors.As(err, &expired) && expired.Reason == x509.Expired; got != tc.expired {
				t.Errorf("expired error %v, want %v (err: %v)", got, tc.expired, err)
			}
		})
	}
	// Backdated: a node whose clock runs a little behind is fine.
	if _, err := a.VerifyNode([]*x509.Certificate{good}, testNow.Add(-enroll.Backdate+time.Second)); err != nil {
		t.Errorf("VerifyNode within the backdate: %v", err)
	}
}

// TestNodeCertOverTLS: a node certificate passes a real TLS 1.3 handshake
// on loopback against ClientCAs with RequireAndVerifyClientCert, the agent
// side trusting the director only by the pin; VerifyNode then names the
// node from what the handshake verified, and refuses it once expired.
func TestNodeCertOverTLS(t *testing.T) {
	a, _ := mustCreate(t, testKEK(t))
	other, _ := mustCreate(t, testKEK(t))
	now := time.Now()
	serving, err := a.ServingCert(nil, now)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert := func(by *Authority) tls.Certificate {
		key := newKey(t)
		der, _, _, err := by.SignNode(csrFor(t, key, &x509.CertificateRequest{}), testNode, now, enroll.CertLifetime)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der, by.Chain()[0]}, PrivateKey: key}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type result struct {
		state tls.ConnectionState
		err   error
	}
	results := make(chan result, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, &tls.Config{
				Certificates: []tls.Certificate{*serving},
				ClientCAs:    a.ClientCAs(),
				ClientAuth:   tls.RequireAndVerifyClientCert,
				MinVersion:   tls.VersionTLS13,
			})
			err = tc.Handshake()
			results <- result{tc.ConnectionState(), err}
			tc.Close()
		}
	}()
	dial := func(cert tls.Certificate) (r result, clientErr error) {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, // the pin is the trust anchor, as for an agent
			VerifyConnection:   enroll.VerifyPinned(a.Pin(), "127.0.0.1"),
			MinVersion:         tls.VersionTLS13,
		})
		if err == nil {
			// TLS 1.3: the server's verdict on the client certificate
			// arrives with the first read.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err = c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
				err = nil // the server closed after its handshake
			}
			c.Close()
		}
		select {
		case r = <-results:
		case <-time.After(10 * time.Second):
			t.Fatal("server handshake did not finish")
		}
		return r, err
	}

	r, err := dial(nodeCert(a))
	if r.err != nil || err != nil {
		t.Fatalf("server handshake: %v; client: %v", r.err, err)
	}
	if len(r.state.VerifiedChains) == 0 {
		t.Fatal("server verified no chain")
	}
	id, err := a.VerifyNode(r.state.PeerCertificates, now)
	if err != nil || id != testNode {
		t.Errorf("VerifyNode = %q, %v; want %q", id, err, testNode)
	}
	var inv x509.CertificateInvalidError
	if _, err := a.VerifyNode(r.state.PeerCertificates, now.AddDate(1, 0, 0)); !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Errorf("VerifyNode a year on: %v, want an expired error", err)
	}

	if r, _ := dial(nodeCert(other)); r.err == nil {
		t.Error("server accepted a node certificate from another CA")
	}
}
