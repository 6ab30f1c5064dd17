package enroll

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"testing"
)

func TestCSR(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := NewCSR(key, "kvm-01")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSR(der)
	if err != nil {
		t.Fatal(err)
	}
	if csr.Subject.CommonName != "kvm-01" {
		t.Errorf("CN = %q; want kvm-01", csr.Subject.CommonName)
	}
	if !key.PublicKey.Equal(csr.PublicKey) {
		t.Error("the CSR's public key is not the key's")
	}
}

func TestParseCSRRefused(t *testing.T) {
	csrWith := func(key any) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	good := csrWith(p256)
	// Change the CN (inside the signed data): the DER still parses,
	// the signature no longer holds.
	// Go writes an ASCII CN as a PrintableString (tag 0x13).
	tampered := bytes.Replace(bytes.Clone(good), []byte{0x13, 0x01, 'x'}, []byte{0x13, 0x01, 'y'}, 1)
	if bytes.Equal(tampered, good) {
		t.Fatal("test CSR has no CN to tamper with")
	}
	tests := []struct {
		name string
		der  []byte
	}{
		{"rsa", csrWith(rsaKey)},
		{"p-384", csrWith(p384)},
		{"tampered", tampered},
		{"truncated", good[:len(good)-10]},
		{"empty", nil},
		{"garbage", []byte("not a csr")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseCSR(tt.der); !errors.Is(err, ErrBadCSR) {
				t.Fatalf("got %v; want ErrBadCSR", err)
			}
		})
	}
}

func TestKeyPEM(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, err := MarshalKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(pemBytes); b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("MarshalKey wrote %q; want one PEM PRIVATE KEY block", pemBytes)
	}
	back, err := ParseKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(key) {
		t.Fatal("ParseKey(MarshalKey(key)) is another key")
	}

	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384DER, err := x509.MarshalPKCS8PrivateKey(p384)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"not pem", []byte("hello")},
		{"other block type", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})},
		{"p-384", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p384DER})},
		{"garbage in the block", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("nope")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseKey(tt.in); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
