package webterm

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var certT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// certFixture is a temp root with a state dir and an admin dir that do
// not exist yet.
type certFixture struct {
	opts CertOptions
	logs *bytes.Buffer
	log  *slog.Logger
}

func newCertFixture(t *testing.T) *certFixture {
	t.Helper()
	root := t.TempDir()
	var buf bytes.Buffer
	return &certFixture{
		opts: CertOptions{
			Dir:      filepath.Join(root, "etc", "virtcon", "tls"),
			StateDir: filepath.Join(root, "var", "lib", "virtcon", "webterm"),
			Names:    []string{"web1", "localhost", "web1.example.com"},
			Addrs:    []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("192.0.2.10")},
			Now:      func() time.Time { return certT0 },
		},
		logs: &buf,
		log:  slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (f *certFixture) ensure(t *testing.T, opts CertOptions) *Cert {
	t.Helper()
	c, err := EnsureCert(context.Background(), f.log, opts)
	if err != nil {
		t.Fatalf("EnsureCert: %v", err)
	}
	return c
}

func (f *certFixture) selfCertPath() string { return filepath.Join(f.opts.StateDir, SelfCertFile) }
func (f *certFixture) selfKeyPath() string  { return filepath.Join(f.opts.StateDir, SelfKeyFile) }

func fileMode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// colonHex is an independent rendering of a fingerprint: hex, upper
// case, a colon after every pair.
func colonHex(sum []byte) string {
	h := strings.ToUpper(hex.EncodeToString(sum))
	var pairs []string
	for i := 0; i < len(h); i += 2 {
		pairs = append(pairs, h[i:i+2])
	}
	return strings.Join(pairs, ":")
}

func TestEnsureCertFirstStart(t *testing.T) {
	f := newCertFixture(t)
	c := f.ensure(t, f.opts)

	if !c.Made || c.Source != SourceSelfSigned || c.Expired {
		t.Errorf("Made, Source, Expired = %v, %q, %v; want true, %q, false", c.Made, c.Source, c.Expired, SourceSelfSigned)
	}
	if got := fileMode(t, f.opts.StateDir); got != 0o700 {
		t.Errorf("state dir mode = %04o; want 0700", got)
	}
	if got := fileMode(t, f.selfKeyPath()); got != 0o600 {
		t.Errorf("key mode = %04o; want 0600", got)
	}
	if c.CertFile != f.selfCertPath() {
		t.Errorf("CertFile = %q; want %q", c.CertFile, f.selfCertPath())
	}
	if _, err := os.Stat(f.opts.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("admin dir %s: %v; want it left alone (not made)", f.opts.Dir, err)
	}

	// what is on disk is what is served
	data, err := os.ReadFile(f.selfCertPath())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", f.selfCertPath())
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(leaf.Raw, c.TLS.Certificate[0]) || c.TLS.Leaf == nil || !bytes.Equal(c.TLS.Leaf.Raw, leaf.Raw) {
		t.Fatalf("the certificate served is not the one in %s", f.selfCertPath())
	}
	keyData, err := os.ReadFile(f.selfKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	if kb, _ := pem.Decode(keyData); kb == nil || kb.Type != "PRIVATE KEY" {
		t.Errorf("%s: no PKCS #8 PEM key", f.selfKeyPath())
	}

	wantDNS := []string{"localhost", "web1", "web1.example.com"}
	if got := slices.Sorted(slices.Values(leaf.DNSNames)); !slices.Equal(got, wantDNS) {
		t.Errorf("DNS SANs = %v; want %v", got, wantDNS)
	}
	var gotIPs []string
	for _, ip := range leaf.IPAddresses {
		gotIPs = append(gotIPs, ip.String())
	}
	slices.Sort(gotIPs)
	if want := []string{"127.0.0.1", "192.0.2.10", "::1"}; !slices.Equal(gotIPs, want) {
		t.Errorf("IP SANs = %v; want %v", gotIPs, want)
	}
	if want := []string{"localhost", "web1", "web1.example.com", "127.0.0.1", "192.0.2.10", "::1"}; !slices.Equal(c.SANs, want) {
		t.Errorf("Cert.SANs = %v; want %v", c.SANs, want)
	}
	if len(leaf.URIs) != 0 || len(leaf.EmailAddresses) != 0 {
		t.Errorf("other SANs: %v %v", leaf.URIs, leaf.EmailAddresses)
	}

	if leaf.Subject.CommonName != "web1" {
		t.Errorf("CN = %q; want the first name that is not localhost, web1", leaf.Subject.CommonName)
	}
	if err := leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if !bytes.Equal(leaf.RawIssuer, leaf.RawSubject) {
		t.Errorf("issuer %v is not the subject %v", leaf.Issuer, leaf.Subject)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T; want ECDSA P-256", leaf.PublicKey)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("KeyUsage = %b; want DigitalSignature only", leaf.KeyUsage)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("ExtKeyUsage = %v; want ServerAuth only", leaf.ExtKeyUsage)
	}
	if !leaf.BasicConstraintsValid || leaf.IsCA {
		t.Errorf("BasicConstraintsValid, IsCA = %v, %v; want true, false", leaf.BasicConstraintsValid, leaf.IsCA)
	}
	if n := leaf.SerialNumber; n.Sign() <= 0 || n.BitLen() > 128 || n.BitLen() < 64 {
		t.Errorf("serial %v (%d bits); want a positive random 128-bit number", n, n.BitLen())
	}
	if want := certT0.Add(-time.Hour); !leaf.NotBefore.Equal(want) {
		t.Errorf("NotBefore = %v; want %v", leaf.NotBefore, want)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 397*24*time.Hour {
		t.Errorf("validity = %v; want 397 days", got)
	}
	if !c.NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("Cert.NotAfter = %v; want %v", c.NotAfter, leaf.NotAfter)
	}

	sum := sha256.Sum256(leaf.Raw)
	if want := colonHex(sum[:]); c.SHA256 != want {
		t.Errorf("SHA256 = %q; want %q", c.SHA256, want)
	}
	if !regexp.MustCompile(`^([0-9A-F]{2}:){31}[0-9A-F]{2}$`).MatchString(c.SHA256) {
		t.Errorf("SHA256 = %q; want 32 uppercase hex pairs joined by colons", c.SHA256)
	}
	spki, err := x509.MarshalPKIXPublicKey(c.TLS.PrivateKey.(*ecdsa.PrivateKey).Public())
	if err != nil {
		t.Fatal(err)
	}
	spkiSum := sha256.Sum256(spki)
	if want := base64.StdEncoding.EncodeToString(spkiSum[:]); c.SPKISHA256 != want {
		t.Errorf("SPKISHA256 = %q; want %q (from the private key's public half)", c.SPKISHA256, want)
	}

	logs := f.logs.String()
	if !strings.Contains(logs, "level=INFO") || !strings.Contains(logs, c.SHA256) {
		t.Errorf("the fingerprint is not logged at info when made:\n%s", logs)
	}
	if strings.Contains(logs, "PRIVATE KEY") || strings.Contains(logs, string(keyData)) {
		t.Errorf("the key is in the log:\n%s", logs)
	}
}

// TestEnsureCertFingerprintOpenSSL checks the fingerprint against what an
// operator's openssl prints for the same file.
func TestEnsureCertFingerprintOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed: cannot compare the fingerprint with its output")
	}
	f := newCertFixture(t)
	c := f.ensure(t, f.opts)
	out, err := exec.Command(openssl, "x509", "-noout", "-fingerprint", "-sha256", "-in", f.selfCertPath()).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	_, got, _ := strings.Cut(strings.TrimSpace(string(out)), "=")
	if got != c.SHA256 {
		t.Errorf("openssl says %q; SHA256 = %q", got, c.SHA256)
	}
}

func TestEnsureCertReuse(t *testing.T) {
	f := newCertFixture(t)
	first := f.ensure(t, f.opts)
	before, err := os.ReadFile(f.selfCertPath())
	if err != nil {
		t.Fatal(err)
	}
	second := f.ensure(t, f.opts)
	if second.Made {
		t.Error("second call: Made = true; want the certificate reused")
	}
	if second.SHA256 != first.SHA256 || second.SPKISHA256 != first.SPKISHA256 {
		t.Errorf("second call: fingerprint %s, SPKI %s; want %s, %s", second.SHA256, second.SPKISHA256, first.SHA256, first.SPKISHA256)
	}
	if !slices.Equal(second.SANs, first.SANs) || second.Source != SourceSelfSigned {
		t.Errorf("second call: SANs %v, Source %q; want %v, %q", second.SANs, second.Source, first.SANs, SourceSelfSigned)
	}
	after, err := os.ReadFile(f.selfCertPath())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the certificate file was rewritten on reuse")
	}
}

// TestEnsureCertRemake makes a certificate with the fixture's options,
// changes something, and calls again.
func TestEnsureCertRemake(t *testing.T) {
	days := func(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }
	// the first certificate's NotAfter is certT0 - 1h + 397 days
	notAfter := certT0.Add(-time.Hour).Add(days(397))
	at := func(tm time.Time) func() time.Time { return func() time.Time { return tm } }

	tests := []struct {
		name     string
		change   func(t *testing.T, f *certFixture, opts *CertOptions)
		wantMade bool
	}{
		{"nothing changed", func(*testing.T, *certFixture, *CertOptions) {}, false},
		{"same names in another order, case and with duplicates", func(_ *testing.T, _ *certFixture, o *CertOptions) {
			o.Names = []string{"WEB1.example.com.", "localhost", "web1", "Web1"}
			o.Addrs = []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("::ffff:127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("192.0.2.10")}
		}, false},
		{"a name added", func(_ *testing.T, _ *certFixture, o *CertOptions) {
			o.Names = append(slices.Clone(o.Names), "web1.other.example")
		}, true},
		{"a name removed", func(_ *testing.T, _ *certFixture, o *CertOptions) {
			o.Names = []string{"web1", "localhost"}
		}, true},
		{"an address changed", func(_ *testing.T, _ *certFixture, o *CertOptions) {
			o.Addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("192.0.2.11")}
		}, true},
		{"31 days left", func(_ *testing.T, _ *certFixture, o *CertOptions) { o.Now = at(notAfter.Add(-days(31))) }, false},
		{"30 days left", func(_ *testing.T, _ *certFixture, o *CertOptions) { o.Now = at(notAfter.Add(-days(30))) }, false},
		{"29 days left", func(_ *testing.T, _ *certFixture, o *CertOptions) { o.Now = at(notAfter.Add(-days(29))) }, true},
		{"expired", func(_ *testing.T, _ *certFixture, o *CertOptions) { o.Now = at(notAfter.Add(time.Hour)) }, true},
		{"clock went back before NotBefore", func(_ *testing.T, _ *certFixture, o *CertOptions) { o.Now = at(certT0.Add(-2 * time.Hour)) }, true},
		{"key mode 0644", func(t *testing.T, f *certFixture, _ *CertOptions) {
			if err := os.Chmod(f.selfKeyPath(), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"key mode 0640", func(t *testing.T, f *certFixture, _ *CertOptions) {
			if err := os.Chmod(f.selfKeyPath(), 0o640); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"key missing", func(t *testing.T, f *certFixture, _ *CertOptions) {
			if err := os.Remove(f.selfKeyPath()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"certificate missing", func(t *testing.T, f *certFixture, _ *CertOptions) {
			if err := os.Remove(f.selfCertPath()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"certificate garbage", func(t *testing.T, f *certFixture, _ *CertOptions) {
			if err := os.WriteFile(f.selfCertPath(), []byte("not a certificate\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"key of another pair", func(t *testing.T, f *certFixture, _ *CertOptions) {
			_, keyPEM := testPair(t, "other", nil, certT0)
			if err := os.WriteFile(f.selfKeyPath(), keyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCertFixture(t)
			first := f.ensure(t, f.opts)
			opts := f.opts
			tt.change(t, f, &opts)
			f.logs.Reset()
			c := f.ensure(t, opts)
			if c.Made != tt.wantMade {
				t.Fatalf("Made = %v; want %v\nlog:\n%s", c.Made, tt.wantMade, f.logs)
			}
			if !tt.wantMade {
				if c.SHA256 != first.SHA256 {
					t.Errorf("fingerprint changed without Made")
				}
				return
			}
			if c.SHA256 == first.SHA256 {
				t.Errorf("Made, but the fingerprint is the old one")
			}
			if got := fileMode(t, f.selfKeyPath()); got != 0o600 {
				t.Errorf("key mode = %04o after remaking; want 0600", got)
			}
			if !strings.Contains(f.logs.String(), "reason=") || !strings.Contains(f.logs.String(), c.SHA256) {
				t.Errorf("remaking is not logged with its reason and fingerprint:\n%s", f.logs)
			}
			// what was made is what a later call with the same options keeps
			again := f.ensure(t, opts)
			if again.Made || again.SHA256 != c.SHA256 {
				t.Errorf("the call after remaking: Made %v, fingerprint %s; want false, %s", again.Made, again.SHA256, c.SHA256)
			}
			want, _, err := wantedSANs(opts.Names, opts.Addrs)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.TLS.Leaf.DNSNames; !slices.Equal(got, want) {
				t.Errorf("DNS SANs = %v; want %v", got, want)
			}
		})
	}
}

// testPair makes an ECDSA certificate and key (PEM) for names, valid
// from now-1h for 90 days. With parent nil it signs itself.
func testPair(t *testing.T, cn string, names []string, now time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(90 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key) // SEC 1, as openssl ecparam writes it
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeAdminPair(t *testing.T, dir string, certPEM, keyPEM []byte, keyMode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if certPEM != nil {
		if err := os.WriteFile(filepath.Join(dir, AdminCertFile), certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if keyPEM != nil {
		path := filepath.Join(dir, AdminKeyFile)
		if err := os.WriteFile(path, keyPEM, keyMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, keyMode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

func TestEnsureCertAdmin(t *testing.T) {
	f := newCertFixture(t)
	// a self-made one exists already: the admin's still wins
	self := f.ensure(t, f.opts)

	leafPEM, keyPEM := testPair(t, "web1.corp.example", []string{"web1.corp.example"}, certT0)
	caPEM, _ := testPair(t, "corp CA", nil, certT0)
	writeAdminPair(t, f.opts.Dir, append(slices.Clone(leafPEM), caPEM...), keyPEM, 0o600)
	f.logs.Reset()

	c := f.ensure(t, f.opts)
	block, _ := pem.Decode(leafPEM)
	sum := sha256.Sum256(block.Bytes)
	switch {
	case c.Source != SourceAdmin:
		t.Errorf("Source = %q; want %q", c.Source, SourceAdmin)
	case c.SHA256 != colonHex(sum[:]) || c.SHA256 == self.SHA256:
		t.Errorf("SHA256 = %s; want the admin leaf's %s", c.SHA256, colonHex(sum[:]))
	case c.Made || c.Expired:
		t.Errorf("Made, Expired = %v, %v; want false, false", c.Made, c.Expired)
	case len(c.TLS.Certificate) != 2:
		t.Errorf("chain of %d certificates served; want the leaf and its CA", len(c.TLS.Certificate))
	case c.TLS.Leaf == nil || c.TLS.Leaf.Subject.CommonName != "web1.corp.example":
		t.Errorf("leaf not parsed or not the admin's: %v", c.TLS.Leaf)
	case !slices.Equal(c.SANs, []string{"web1.corp.example"}):
		t.Errorf("SANs = %v; want the admin leaf's", c.SANs)
	case c.CertFile != filepath.Join(f.opts.Dir, AdminCertFile):
		t.Errorf("CertFile = %q", c.CertFile)
	}
	if strings.Contains(f.logs.String(), "level=WARN") {
		t.Errorf("warning for a valid admin certificate:\n%s", f.logs)
	}

	// expired: served anyway, with a warning
	late := f.opts
	late.Now = func() time.Time { return certT0.Add(91 * 24 * time.Hour) }
	f.logs.Reset()
	c = f.ensure(t, late)
	if c.Source != SourceAdmin || !c.Expired {
		t.Errorf("expired admin certificate: Source %q, Expired %v; want %q, true", c.Source, c.Expired, SourceAdmin)
	}
	if !strings.Contains(f.logs.String(), "level=WARN") || !strings.Contains(f.logs.String(), "expired") {
		t.Errorf("no warning for an expired admin certificate:\n%s", f.logs)
	}
}

// TestEnsureCertAdminBroken: whatever the admin put there and cannot be
// used is an error naming the file, never a silent self-signed fallback.
func TestEnsureCertAdminBroken(t *testing.T) {
	certPEM, keyPEM := testPair(t, "admin", []string{"web1"}, certT0)
	_, otherKeyPEM := testPair(t, "other", nil, certT0)
	tests := []struct {
		name     string
		cert     []byte
		key      []byte
		keyMode  fs.FileMode
		wantFile string
		wantIs   error
		wantText string
	}{
		{"key readable by group", certPEM, keyPEM, 0o640, AdminKeyFile, ErrKeyExposed, "mode 0640"},
		{"key readable by others", certPEM, keyPEM, 0o604, AdminKeyFile, ErrKeyExposed, "mode 0604"},
		{"key missing", certPEM, nil, 0, AdminKeyFile, ErrIncompletePair, "missing"},
		{"certificate missing", nil, keyPEM, 0o600, AdminCertFile, ErrIncompletePair, "missing"},
		{"certificate garbage", []byte("hello\n"), keyPEM, 0o600, AdminCertFile, nil, "no PEM certificate"},
		{"certificate PEM of garbage", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), keyPEM, 0o600, AdminCertFile, nil, "certificate 1"},
		{"key garbage", certPEM, []byte("hello\n"), 0o600, AdminKeyFile, nil, "no PEM private key"},
		{"key PEM of garbage", certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("junk")}), 0o600, AdminKeyFile, nil, "private key"},
		{"key of another certificate", certPEM, otherKeyPEM, 0o600, AdminKeyFile, nil, "not the key of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCertFixture(t)
			writeAdminPair(t, f.opts.Dir, tt.cert, tt.key, tt.keyMode)
			c, err := EnsureCert(context.Background(), f.log, f.opts)
			if err == nil {
				t.Fatalf("EnsureCert = %s certificate; want an error", c.Source)
			}
			path := filepath.Join(f.opts.Dir, tt.wantFile)
			var ce *CertError
			if !errors.As(err, &ce) || ce.Path != path {
				t.Errorf("error %q (%T); want a *CertError for %s", err, err, path)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q; want it to name %s and say %q", err, path, tt.wantText)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q; want errors.Is %v", err, tt.wantIs)
			}
			if _, err := os.Stat(f.opts.StateDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("state dir %s: %v; want no self-signed fallback made", f.opts.StateDir, err)
			}
		})
	}
}

func TestEnsureCertBadOptions(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		change func(*CertOptions)
		want   string
	}{
		{"no state dir", context.Background(), func(o *CertOptions) { o.StateDir = "" }, "no state directory"},
		{"no names or addresses", context.Background(), func(o *CertOptions) { o.Names, o.Addrs = []string{" ", ""}, nil }, "no names or addresses"},
		{"a name that is not one", context.Background(), func(o *CertOptions) { o.Names = []string{"web1", "bad name"} }, `name "bad name"`},
		{"cancelled", cancelled, func(*CertOptions) {}, context.Canceled.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newCertFixture(t)
			opts := f.opts
			tt.change(&opts)
			_, err := EnsureCert(tt.ctx, f.log, opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("EnsureCert error = %v; want one saying %q", err, tt.want)
			}
			if opts.StateDir != "" {
				if _, err := os.Stat(opts.StateDir); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("state dir %s: %v; want nothing made", opts.StateDir, err)
				}
			}
		})
	}
}

// TestEnsureCertAddressesOnly: a certificate for addresses alone is named
// after its first address.
func TestEnsureCertAddressesOnly(t *testing.T) {
	f := newCertFixture(t)
	opts := f.opts
	opts.Names = nil
	c := f.ensure(t, opts)
	if got := c.TLS.Leaf.Subject.CommonName; got != "127.0.0.1" {
		t.Errorf("CN = %q; want 127.0.0.1", got)
	}
	if len(c.TLS.Leaf.DNSNames) != 0 {
		t.Errorf("DNS SANs = %v; want none", c.TLS.Leaf.DNSNames)
	}
}

// TestEnsureCertTLSHandshake serves the self-made certificate on loopback
// and dials it with real TLS, trusting only that certificate.
func TestEnsureCertTLSHandshake(t *testing.T) {
	f := newCertFixture(t)
	opts := f.opts
	opts.Now = nil // the real clock: crypto/tls checks validity against it
	c := f.ensure(t, opts)

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{c.TLS}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				if conn.(*tls.Conn).Handshake() == nil {
					io.WriteString(conn, "ok")
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	pool := x509.NewCertPool()
	pool.AddCert(c.TLS.Leaf)
	tests := []struct {
		name       string
		serverName string
		wantErr    bool
	}{
		{"localhost", "localhost", false},
		{"host name", "web1", false},
		{"IP address", "127.0.0.1", false},
		{"a name not in the certificate", "evil.example", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &net.Dialer{Timeout: 5 * time.Second}
			conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort("127.0.0.1", port), &tls.Config{
				RootCAs: pool, ServerName: tt.serverName, MinVersion: tls.VersionTLS12,
			})
			if tt.wantErr {
				if err == nil {
					conn.Close()
					t.Fatal("handshake succeeded; want a verification error")
				}
				var he x509.HostnameError
				if !errors.As(err, &he) {
					t.Errorf("error %v; want a host name error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			defer conn.Close()
			st := conn.ConnectionState()
			if got := certFingerprint(st.PeerCertificates[0].Raw); got != c.SHA256 {
				t.Errorf("peer fingerprint %s; want %s", got, c.SHA256)
			}
			if st.Version < tls.VersionTLS12 {
				t.Errorf("TLS version %x", st.Version)
			}
			b, err := io.ReadAll(conn)
			if err != nil || string(b) != "ok" {
				t.Errorf("read %q, %v; want ok", b, err)
			}
		})
	}
}
