package enroll

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

type testCert struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// issue makes a certificate from tmpl signed by parent (self-signed when
// parent is nil).
func issue(t *testing.T, tmpl *x509.Certificate, parent *testCert) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	signer, parentCert := crypto.Signer(key), tmpl
	if parent != nil {
		signer, parentCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCert{cert, key}
}

func caTemplate(name string, pathLen int) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            pathLen,
		MaxPathLenZero:        pathLen == 0,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
}

func serverTemplate(eku x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: "director"},
		DNSNames:    []string{"director.test", "localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{eku},
	}
}

type testPKI struct {
	root, inter, leaf *testCert
}

func newPKI(t *testing.T) testPKI {
	root := issue(t, caTemplate("root", 1), nil)
	inter := issue(t, caTemplate("intermediate", 0), root)
	leaf := issue(t, serverTemplate(x509.ExtKeyUsageServerAuth), inter)
	return testPKI{root, inter, leaf}
}

// serve runs a TLS server on loopback presenting chain (leaf first) and
// returns its address.
func serve(t *testing.T, key crypto.Signer, chain ...*x509.Certificate) string {
	t.Helper()
	cert := tls.Certificate{PrivateKey: key}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = c.(*tls.Conn).Handshake() // the client's verdict is what the test reads
			}()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes with addr the way the agent does: no system roots, the
// pin the only trust.
func dial(addr, pin, serverName string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{
		InsecureSkipVerify: true, // VerifyConnection does the verification
		ServerName:         serverName,
		VerifyConnection:   VerifyPinned(pin, serverName),
		MinVersion:         tls.VersionTLS13,
	})
	if err != nil {
		return err
	}
	return c.Close()
}

func TestVerifyPinned(t *testing.T) {
	pki := newPKI(t)
	other := newPKI(t)
	full := serve(t, pki.leaf.key, pki.leaf.cert, pki.inter.cert, pki.root.cert)
	noRoot := serve(t, pki.leaf.key, pki.leaf.cert, pki.inter.cert)
	// An impostor with its own CA who copied the real root certificate
	// (public) into its chain: the pin matches a presented certificate,
	// but the leaf does not chain to it.
	impostor := serve(t, other.leaf.key, other.leaf.cert, other.inter.cert, pki.root.cert)
	clientLeaf := issue(t, serverTemplate(x509.ExtKeyUsageClientAuth), pki.inter)
	clientOnly := serve(t, clientLeaf.key, clientLeaf.cert, pki.inter.cert, pki.root.cert)
	expiredLeaf := issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "director"}, DNSNames: []string{"director.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore:   time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
	}, pki.inter)
	expired := serve(t, expiredLeaf.key, expiredLeaf.cert, pki.inter.cert, pki.root.cert)
	rootPin := SPKIPin(pki.root.cert)

	tests := []struct {
		name, addr, pin, serverName string
		wantErr                     error  // nil: accepted
		refused                     string // refused without a sentinel, for this reason
	}{
		{name: "root pin, dns name", addr: full, pin: rootPin, serverName: "director.test"},
		{name: "root pin, localhost", addr: full, pin: rootPin, serverName: "localhost"},
		{name: "root pin, ipv4", addr: full, pin: rootPin, serverName: "127.0.0.1"},
		{name: "root pin, ipv6", addr: full, pin: rootPin, serverName: "::1"},
		{name: "intermediate pin", addr: full, pin: SPKIPin(pki.inter.cert), serverName: "director.test"},
		{name: "wrong pin", addr: full, pin: SPKIPin(other.root.cert), serverName: "director.test", wantErr: ErrPinMismatch},
		{name: "no pin", addr: full, pin: "", serverName: "director.test", wantErr: ErrNoPin},
		{name: "root not sent", addr: noRoot, pin: rootPin, serverName: "director.test", wantErr: ErrPinMismatch},
		{name: "leaf not for the name", addr: full, pin: rootPin, serverName: "other.test", refused: "not other.test"},
		{name: "leaf not for the ip", addr: full, pin: rootPin, serverName: "192.0.2.9", refused: "not 192.0.2.9"},
		{name: "no server name", addr: full, pin: rootPin, serverName: "", refused: "no server name"},
		{name: "impostor with a copy of the root", addr: impostor, pin: rootPin, serverName: "director.test", refused: "unknown authority"},
		{name: "leaf for client auth only", addr: clientOnly, pin: rootPin, serverName: "director.test", refused: "incompatible key usage"},
		{name: "leaf expired", addr: expired, pin: rootPin, serverName: "director.test", refused: "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dial(tt.addr, tt.pin, tt.serverName)
			switch {
			case tt.wantErr == nil && tt.refused == "":
				if err != nil {
					t.Fatalf("got %v; want the handshake to succeed", err)
				}
			case tt.refused != "":
				if err == nil {
					t.Fatal("handshake succeeded; want it refused")
				}
				if !strings.Contains(err.Error(), tt.refused) {
					t.Errorf("got %v; want it refused for %q", err, tt.refused)
				}
				if errors.Is(err, ErrPinMismatch) || errors.Is(err, ErrNoPin) {
					t.Errorf("got %v; want a verification error, not a pin one", err)
				}
			default:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v; want %v", err, tt.wantErr)
				}
			}
		})
	}
}

func TestVerifyPinnedMismatchNamesPins(t *testing.T) {
	pki := newPKI(t)
	want := SPKIPin(newPKI(t).root.cert)
	err := VerifyPinned(want, "director.test")(tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{pki.leaf.cert, pki.inter.cert, pki.root.cert},
	})
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("got %v; want ErrPinMismatch", err)
	}
	for _, c := range []*x509.Certificate{pki.leaf.cert, pki.inter.cert, pki.root.cert} {
		if !strings.Contains(err.Error(), SPKIPin(c)) {
			t.Errorf("error %q does not name the presented pin %s", err, SPKIPin(c))
		}
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the expected pin %s", err, want)
	}
	if err := VerifyPinned(want, "director.test")(tls.ConnectionState{}); err == nil {
		t.Error("no certificates accepted")
	}
}

func TestSPKIPin(t *testing.T) {
	pki := newPKI(t)
	pin := SPKIPin(pki.root.cert)
	if err := checkPin(pin); err != nil {
		t.Fatalf("SPKIPin = %q, which a join string refuses: %v", pin, err)
	}
	// The same key re-issued in a new certificate keeps its pin.
	tmpl := caTemplate("root again", 1)
	tmpl.SerialNumber = big.NewInt(2)
	tmpl.NotBefore, tmpl.NotAfter = time.Now(), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pki.root.key.Public(), pki.root.key)
	if err != nil {
		t.Fatal(err)
	}
	again, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if SPKIPin(again) != pin {
		t.Errorf("re-issued root over the same key: pin %s; want %s", SPKIPin(again), pin)
	}
	if SPKIPin(pki.inter.cert) == pin {
		t.Error("two keys got the same pin")
	}
}
