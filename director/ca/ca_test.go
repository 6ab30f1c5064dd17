package ca

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/enroll"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testKEK(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KEKSize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func mustCreate(t testing.TB, kek []byte) (*Authority, Sealed) {
	t.Helper()
	a, s, err := Create(testNow, kek)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return a, s
}

func TestCreateProfile(t *testing.T) {
	a, _ := mustCreate(t, testKEK(t))
	root, inter := a.Root(), a.Intermediate()
	for _, c := range []struct {
		name       string
		cert       *x509.Certificate
		cn         string
		pathLen    int
		notAfter   time.Time
		issuerSelf bool
	}{
		{"root", root, "virtcon director root CA ", 1, testNow.AddDate(10, 0, 0), true},
		{"intermediate", inter, "virtcon director signing CA ", 0, testNow.AddDate(5, 0, 0), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.HasPrefix(c.cert.Subject.CommonName, c.cn) || len(c.cert.Subject.CommonName) != len(c.cn)+8 {
				t.Errorf("CN %q, want %q + 8 hex digits", c.cert.Subject.CommonName, c.cn)
			}
			if !c.cert.IsCA || !c.cert.BasicConstraintsValid {
				t.Errorf("IsCA %v BasicConstraintsValid %v, want both", c.cert.IsCA, c.cert.BasicConstraintsValid)
			}
			if c.cert.MaxPathLen != c.pathLen || (c.pathLen == 0) != c.cert.MaxPathLenZero {
				t.Errorf("MaxPathLen %d (zero %v), want %d", c.cert.MaxPathLen, c.cert.MaxPathLenZero, c.pathLen)
			}
			if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; c.cert.KeyUsage != want {
				t.Errorf("KeyUsage %v, want %v", c.cert.KeyUsage, want)
			}
			if want := testNow.Add(-enroll.Backdate); !c.cert.NotBefore.Equal(want) {
				t.Errorf("NotBefore %v, want %v", c.cert.NotBefore, want)
			}
			if !c.cert.NotAfter.Equal(c.notAfter) {
				t.Errorf("NotAfter %v, want %v", c.cert.NotAfter, c.notAfter)
			}
			if pub, ok := c.cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("key %T, want ECDSA P-256", c.cert.PublicKey)
			}
			if got := bytes.Equal(c.cert.RawIssuer, c.cert.RawSubject); got != c.issuerSelf {
				t.Errorf("self-issued %v, want %v", got, c.issuerSelf)
			}
		})
	}
	if err := inter.CheckSignatureFrom(root); err != nil {
		t.Errorf("intermediate not signed by root: %v", err)
	}
	if root.Subject.CommonName[len(root.Subject.CommonName)-8:] != inter.Subject.CommonName[len(inter.Subject.CommonName)-8:] {
		t.Errorf("root %q and intermediate %q carry different tags", root.Subject.CommonName, inter.Subject.CommonName)
	}
	b, _ := mustCreate(t, testKEK(t))
	if a.Root().Subject.CommonName == b.Root().Subject.CommonName {
		t.Errorf("two CAs both named %q", a.Root().Subject.CommonName)
	}
}

func TestCreateOpenRoundTrip(t *testing.T) {
	kek := testKEK(t)
	a, s := mustCreate(t, kek)
	if !a.CanSign() {
		t.Fatal("created Authority cannot sign")
	}
	for _, tc := range []struct {
		name    string
		kek     []byte
		canSign bool
	}{
		{"with kek", kek, true},
		{"without kek", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Open(s, tc.kek)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if b.CanSign() != tc.canSign {
				t.Errorf("CanSign %v, want %v", b.CanSign(), tc.canSign)
			}
			if !b.Root().Equal(a.Root()) || !b.Intermediate().Equal(a.Intermediate()) {
				t.Error("opened certificates differ from the created ones")
			}
			if b.Pin() != a.Pin() || b.Pin() != enroll.SPKIPin(a.Root()) {
				t.Errorf("Pin %q, want %q", b.Pin(), enroll.SPKIPin(a.Root()))
			}
			ch := b.Chain()
			if len(ch) != 2 || !bytes.Equal(ch[0], s.IntermediateCert) || !bytes.Equal(ch[1], s.RootCert) {
				t.Errorf("Chain is not [intermediate, root]")
			}
			ch[0][0] ^= 0xff // a caller's copy: must not reach the Authority
			if !bytes.Equal(b.Chain()[0], s.IntermediateCert) {
				t.Error("Chain returned the Authority's own slice")
			}
			if !b.ClientCAs().Equal(a.ClientCAs()) {
				t.Error("ClientCAs differ")
			}
			// What the opened one signs, the created one verifies.
			signer := b
			if !b.CanSign() {
				signer = a
			}
			id := "6f1c7c1e-8e1b-4d55-9a38-0d1f3c1d2e4f"
			der, _, _, err := signer.SignNode(newCSR(t, "h"), id, testNow, enroll.CertLifetime)
			if err != nil {
				t.Fatalf("SignNode: %v", err)
			}
			got, err := b.VerifyNode([]*x509.Certificate{parse(t, der)}, testNow)
			if err != nil || got != id {
				t.Errorf("VerifyNode = %q, %v; want %q", got, err, id)
			}
		})
	}
}

func TestOpenRefuses(t *testing.T) {
	kek := testKEK(t)
	_, s := mustCreate(t, kek)
	// other is a second CA under the same KEK: its blobs open, but not
	// next to s's certificates.
	_, other := mustCreate(t, kek)
	flip := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		if i < 0 {
			i += len(c)
		}
		c[i] ^= 0x01
		return c
	}
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPKCS8, err := x509.MarshalPKCS8PrivateKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name       string
		mutate     func(s *Sealed) []byte // returns the KEK to open with
		wantSealed bool
		wantIn     string
		nilKEKToo  bool // the failure does not depend on the KEK: Open(s, nil) fails as well
	}{
		{"wrong kek", func(*Sealed) []byte { return testKEK(t) }, true, "root key", false},
		{"kek one bit off", func(*Sealed) []byte { return flip(kek, 0) }, true, "root key", false},
		{"kek too short", func(*Sealed) []byte { return kek[:16] }, false, "16 bytes, want 32", false},
		{"kek empty, not nil", func(*Sealed) []byte { return []byte{} }, false, "0 bytes, want 32", false},
		{"root blob in the intermediate slot", func(s *Sealed) []byte { s.IntermediateKey = s.RootKey; return kek }, true, "intermediate key", false},
		{"intermediate blob in the root slot", func(s *Sealed) []byte { s.RootKey = s.IntermediateKey; return kek }, true, "root key", false},
		{"blobs swapped", func(s *Sealed) []byte { s.RootKey, s.IntermediateKey = s.IntermediateKey, s.RootKey; return kek }, true, "root key", false},
		{"another CA's intermediate blob", func(s *Sealed) []byte { s.IntermediateKey = other.IntermediateKey; return kek }, true, "intermediate key", false},
		{"another CA's root blob", func(s *Sealed) []byte { s.RootKey = other.RootKey; return kek }, true, "root key", false},
		{"intermediate ciphertext tampered", func(s *Sealed) []byte { s.IntermediateKey = flip(s.IntermediateKey, -1); return kek }, true, "intermediate key", false},
		{"intermediate ciphertext tampered mid-way", func(s *Sealed) []byte { s.IntermediateKey = flip(s.IntermediateKey, 40); return kek }, true, "intermediate key", false},
		{"intermediate nonce tampered", func(s *Sealed) []byte { s.IntermediateKey = flip(s.IntermediateKey, 0); return kek }, true, "intermediate key", false},
		{"root ciphertext tampered", func(s *Sealed) []byte { s.RootKey = flip(s.RootKey, -1); return kek }, true, "root key", false},
		{"intermediate blob truncated", func(s *Sealed) []byte { s.IntermediateKey = s.IntermediateKey[:20]; return kek }, true, "too short", false},
		{"intermediate blob empty", func(s *Sealed) []byte { s.IntermediateKey = nil; return kek }, true, "intermediate key", false},
		{"intermediate blob one byte shorter", func(s *Sealed) []byte { s.IntermediateKey = s.IntermediateKey[:len(s.IntermediateKey)-1]; return kek }, true, "intermediate key", false},
		{"intermediate not signed by root", func(s *Sealed) []byte {
			s.IntermediateCert, s.IntermediateKey = other.IntermediateCert, other.IntermediateKey
			return kek
		}, false, "is not signed by root", true},
		{"root replaced", func(s *Sealed) []byte { s.RootCert, s.RootKey = other.RootCert, other.RootKey; return kek }, false, "is not signed by root", true},
		{"intermediate given as root", func(s *Sealed) []byte { s.RootCert = s.IntermediateCert; return kek }, false, "root certificate: path length 0, want 1", true},
		{"root given as intermediate", func(s *Sealed) []byte { s.IntermediateCert = s.RootCert; return kek }, false, "intermediate certificate: path length 1, want 0", true},
		{"root certificate missing", func(s *Sealed) []byte { s.RootCert = nil; return kek }, false, "root certificate: missing", true},
		{"intermediate certificate garbage", func(s *Sealed) []byte { s.IntermediateCert = []byte("not der"); return kek }, false, "intermediate certificate", true},
		{"intermediate certificate tampered", func(s *Sealed) []byte { s.IntermediateCert = flip(s.IntermediateCert, -5); return kek }, false, "intermediate certificate", true},
		{"intermediate blob seals another key", func(s *Sealed) []byte {
			// Only someone holding the KEK could make this; Open still
			// refuses a key that does not match its certificate.
			b, err := seal(kek, nameInter, s.IntermediateCert, otherPKCS8)
			if err != nil {
				t.Fatal(err)
			}
			s.IntermediateKey = b
			return kek
		}, false, "intermediate key does not match the intermediate certificate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Sealed{
				RootCert:         append([]byte(nil), s.RootCert...),
				IntermediateCert: append([]byte(nil), s.IntermediateCert...),
				RootKey:          append([]byte(nil), s.RootKey...),
				IntermediateKey:  append([]byte(nil), s.IntermediateKey...),
			}
			k := tc.mutate(&m)
			a, err := Open(m, k)
			if err == nil {
				t.Fatalf("Open succeeded (CanSign %v); want an error containing %q", a.CanSign(), tc.wantIn)
			}
			if a != nil {
				t.Errorf("Open returned an Authority with its error")
			}
			if got := errors.Is(err, ErrSealed); got != tc.wantSealed {
				t.Errorf("errors.Is(err, ErrSealed) = %v, want %v (err: %v)", got, tc.wantSealed, err)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q, want it to contain %q", err, tc.wantIn)
			}
			_, err = Open(m, nil)
			if tc.nilKEKToo && err == nil {
				t.Error("Open without a KEK accepted it")
			}
			if !tc.nilKEKToo && err != nil {
				t.Errorf("Open without a KEK: %v; want success (the certificates are fine)", err)
			}
		})
	}
}

// TestSealedAADFormat opens the sealed intermediate key by hand, with the
// AAD the Sealed type documents: anyone reading the etcd value can tell
// what it is bound to.
func TestSealedAADFormat(t *testing.T) {
	kek := testKEK(t)
	a, s, err := Create(testNow, kek)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(kek)
	g, _ := cipher.NewGCM(block)
	sum := sha256.Sum256(s.IntermediateCert)
	aad := "virtcon-director/v1 intermediate " + hex.EncodeToString(sum[:])
	plain, err := g.Open(nil, s.IntermediateKey[:g.NonceSize()], s.IntermediateKey[g.NonceSize():], []byte(aad))
	if err != nil {
		t.Fatalf("open with AAD %q: %v", aad, err)
	}
	want, _ := x509.MarshalPKCS8PrivateKey(a.interKey)
	if !bytes.Equal(plain, want) {
		t.Error("sealed intermediate plaintext is not the key's PKCS #8 DER")
	}
}

func TestSealedHoldsNoClearKey(t *testing.T) {
	kek := testKEK(t)
	a, s, rootKey, err := create(testNow, kek)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string][]byte{
		"RootCert": s.RootCert, "IntermediateCert": s.IntermediateCert,
		"RootKey": s.RootKey, "IntermediateKey": s.IntermediateKey,
	}
	for _, k := range []struct {
		name string
		key  *ecdsa.PrivateKey
		blob []byte
	}{
		{nameRoot, rootKey, s.RootKey},
		{nameInter, a.interKey, s.IntermediateKey},
	} {
		pkcs8, err := x509.MarshalPKCS8PrivateKey(k.key)
		if err != nil {
			t.Fatal(err)
		}
		sec1, err := x509.MarshalECPrivateKey(k.key)
		if err != nil {
			t.Fatal(err)
		}
		d, err := k.key.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		needles := map[string][]byte{"PKCS #8 DER": pkcs8, "SEC 1 DER": sec1, "raw scalar D": d}
		// The needles are the right ones: they are in the plaintext.
		plain, err := unseal(kek, k.name, certFor(s, k.name), k.blob)
		if err != nil {
			t.Fatal(err)
		}
		for n, needle := range needles {
			if n != "SEC 1 DER" && !bytes.Contains(plain, needle) {
				t.Fatalf("%s key: %s not in its own plaintext: the search below could not find it either", k.name, n)
			}
			for f, hay := range fields {
				if bytes.Contains(hay, needle) {
					t.Errorf("%s key's %s appears in clear in Sealed.%s", k.name, n, f)
				}
			}
		}
		// Half the scalar is no better: the DER forms end in the public
		// point, which the certificate carries, so only D is cut.
		for f, hay := range fields {
			if bytes.Contains(hay, d[:16]) || bytes.Contains(hay, d[16:]) {
				t.Errorf("half of the %s key's scalar D appears in Sealed.%s", k.name, f)
			}
		}
	}
}

func certFor(s Sealed, name string) []byte {
	if name == nameRoot {
		return s.RootCert
	}
	return s.IntermediateCert
}

func TestCreateRefusesBadKEK(t *testing.T) {
	for _, kek := range [][]byte{nil, {}, make([]byte, 16), make([]byte, 33)} {
		if _, _, err := Create(testNow, kek); err == nil || !strings.Contains(err.Error(), "want 32") {
			t.Errorf("Create with a %d-byte KEK: err %v, want one saying \"want 32\"", len(kek), err)
		}
	}
}
