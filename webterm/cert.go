package webterm

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// The files of the certificate. An admin's pair goes in CertOptions.Dir
// (/etc/virtcon/tls); the self-made one lives in CertOptions.StateDir.
const (
	AdminCertFile = "cert.pem"
	AdminKeyFile  = "key.pem"
	SelfCertFile  = "webterm-cert.pem"
	SelfKeyFile   = "webterm-key.pem"
)

// The self-made certificate: valid 397 days (under the 398 that browsers
// accept for a server certificate), remade when fewer than 30 remain.
const (
	selfCertValidity = 397 * 24 * time.Hour
	selfCertRenew    = 30 * 24 * time.Hour
	selfCertBackdate = time.Hour // a client whose clock is a little behind still accepts it
)

// Cert sources.
const (
	SourceAdmin      = "admin"
	SourceSelfSigned = "self-signed"
)

// ErrKeyExposed is an admin's private key that group or others can read:
// it is refused rather than served, so that the admin notices.
var ErrKeyExposed = errors.New("private key readable by group or others")

// ErrIncompletePair is an admin's certificate without its key, or a key
// without its certificate.
var ErrIncompletePair = errors.New("cert.pem and key.pem go together")

// CertError is a certificate or key file that cannot be used or written.
// Path names the file at fault; Err wraps the cause (ErrKeyExposed,
// ErrIncompletePair, a parse error, an fs error).
type CertError struct {
	Path string
	Err  error
}

func (e *CertError) Error() string {
	return fmt.Sprintf("web terminal certificate %s: %v", e.Path, e.Err)
}

func (e *CertError) Unwrap() error { return e.Err }

// CertOptions says where the web terminal's certificate comes from.
type CertOptions struct {
	// Dir holds an admin's cert.pem (the leaf, optionally followed by its
	// chain) and key.pem, which win over a self-made certificate.
	// Usually layout.ConfigDir()+"/tls". Empty: no admin certificate.
	Dir string
	// StateDir is where the self-made certificate and key live; it is
	// made 0700 if missing.
	StateDir string
	// Names (DNS) and Addrs (IP) are the subject alternative names the
	// self-made certificate must carry (LocalNames gives them). Order and
	// duplicates do not matter; names are compared without case.
	Names []string
	Addrs []netip.Addr
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Cert is the certificate the web terminal serves.
type Cert struct {
	TLS tls.Certificate // with Leaf set
	// SHA256 is the fingerprint of the leaf's DER: uppercase hex pairs
	// joined by colons, as openssl x509 -fingerprint -sha256 prints it.
	SHA256 string
	// SPKISHA256 is base64(sha256(SubjectPublicKeyInfo)), the form of
	// chromium's --ignore-certificate-errors-spki-list.
	SPKISHA256 string
	// SANs are the leaf's DNS names then its IP addresses.
	SANs     []string
	Source   string // SourceAdmin or SourceSelfSigned
	NotAfter time.Time
	// Expired is an admin certificate past its NotAfter (or before its
	// NotBefore): served anyway, since the admin put it there, but worth
	// a warning. A self-made one is never expired.
	Expired bool
	// Made says the self-made certificate was made or remade by this call.
	Made bool
	// CertFile is the PEM file the certificate was loaded from or written
	// to (what an operator downloads to trust it).
	CertFile string
}

// EnsureCert returns the certificate to serve: an admin's pair from
// opts.Dir when there is one, otherwise the self-signed one in
// opts.StateDir, made (or remade) when it is missing, does not load, has
// a key file others can read, carries other names than opts.Names and
// opts.Addrs, or has fewer than 30 days left.
//
// An admin's pair that is incomplete, does not parse, does not match or
// has a key readable by group or others is an error (*CertError naming the
// file): it never falls back to a self-signed certificate, which would
// hide the admin's mistake behind a browser warning.
func EnsureCert(ctx context.Context, log *slog.Logger, opts CertOptions) (*Cert, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if opts.Dir != "" {
		c, err := loadAdminCert(ctx, log, opts.Dir, now())
		if err != nil || c != nil {
			return c, err
		}
	}
	return ensureSelfSigned(ctx, log, opts, now())
}

// loadAdminCert loads the admin's pair in dir; nil and no error when
// neither file is there.
func loadAdminCert(ctx context.Context, log *slog.Logger, dir string, now time.Time) (*Cert, error) {
	certPath := filepath.Join(dir, AdminCertFile)
	keyPath := filepath.Join(dir, AdminKeyFile)
	certInfo, certErr := os.Stat(certPath)
	keyInfo, keyErr := os.Stat(keyPath)
	// anything but "not there" is a pair we cannot judge: fail closed
	for _, f := range []struct {
		path string
		err  error
	}{{certPath, certErr}, {keyPath, keyErr}} {
		if f.err != nil && !errors.Is(f.err, fs.ErrNotExist) {
			return nil, &CertError{Path: f.path, Err: f.err}
		}
	}
	switch {
	case certErr != nil && keyErr != nil:
		return nil, nil
	case certErr != nil:
		return nil, &CertError{Path: certPath, Err: fmt.Errorf("missing, but %s is there (%w)", keyPath, ErrIncompletePair)}
	case keyErr != nil:
		return nil, &CertError{Path: keyPath, Err: fmt.Errorf("missing, but %s is there (%w)", certPath, ErrIncompletePair)}
	}
	if !certInfo.Mode().IsRegular() {
		return nil, &CertError{Path: certPath, Err: fmt.Errorf("not a regular file (%s)", certInfo.Mode().Type())}
	}
	if !keyInfo.Mode().IsRegular() {
		return nil, &CertError{Path: keyPath, Err: fmt.Errorf("not a regular file (%s)", keyInfo.Mode().Type())}
	}
	if perm := keyInfo.Mode().Perm(); perm&0o077 != 0 {
		return nil, &CertError{Path: keyPath, Err: fmt.Errorf("mode %04o: %w", perm, ErrKeyExposed)}
	}
	pair, err := loadPair(certPath, keyPath)
	if err != nil {
		return nil, err
	}
	c := newCert(pair, SourceAdmin, certPath)
	leaf := pair.Leaf
	switch {
	case now.After(leaf.NotAfter):
		c.Expired = true
		log.WarnContext(ctx, "web terminal: the admin's certificate has expired; serving it anyway",
			"file", certPath, "notAfter", leaf.NotAfter, "sha256", c.SHA256)
	case now.Before(leaf.NotBefore):
		c.Expired = true
		log.WarnContext(ctx, "web terminal: the admin's certificate is not valid yet; serving it anyway",
			"file", certPath, "notBefore", leaf.NotBefore, "sha256", c.SHA256)
	default:
		log.InfoContext(ctx, "web terminal: serving the admin's certificate",
			"file", certPath, "notAfter", leaf.NotAfter, "sha256", c.SHA256)
	}
	return c, nil
}

// ensureSelfSigned reuses the self-made pair in opts.StateDir when it
// still fits, and makes a new one otherwise.
func ensureSelfSigned(ctx context.Context, log *slog.Logger, opts CertOptions, now time.Time) (*Cert, error) {
	if opts.StateDir == "" {
		return nil, errors.New("web terminal certificate: no state directory for a self-signed certificate")
	}
	names, addrs, err := wantedSANs(opts.Names, opts.Addrs)
	if err != nil {
		return nil, err
	}
	certPath := filepath.Join(opts.StateDir, SelfCertFile)
	keyPath := filepath.Join(opts.StateDir, SelfKeyFile)

	pair, reason := loadSelfSigned(certPath, keyPath, names, addrs, now)
	if reason == "" {
		c := newCert(pair, SourceSelfSigned, certPath)
		log.DebugContext(ctx, "web terminal: reusing the self-signed certificate",
			"file", certPath, "notAfter", c.NotAfter, "sha256", c.SHA256)
		return c, nil
	}
	log.InfoContext(ctx, "web terminal: making a self-signed certificate", "file", certPath, "reason", reason)

	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, &CertError{Path: opts.StateDir, Err: err}
	}
	certPEM, keyPEM, err := makeSelfSigned(commonName(opts.Names, addrs), names, addrs, now)
	if err != nil {
		return nil, &CertError{Path: certPath, Err: err}
	}
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &CertError{Path: certPath, Err: err}
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, &CertError{Path: certPath, Err: err}
		}
	}
	// key first: a crash between the two leaves a pair that does not
	// match, which the next start remakes
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return nil, &CertError{Path: keyPath, Err: err}
	}
	if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
		return nil, &CertError{Path: certPath, Err: err}
	}
	c := newCert(pair, SourceSelfSigned, certPath)
	c.Made = true
	log.InfoContext(ctx, "web terminal: made a self-signed certificate",
		"file", certPath, "sha256", c.SHA256, "spkiSha256", c.SPKISHA256,
		"sans", strings.Join(c.SANs, ","), "notAfter", c.NotAfter)
	return c, nil
}

// loadSelfSigned loads the self-made pair when it can be reused, or says
// why it must be remade.
func loadSelfSigned(certPath, keyPath string, names []string, addrs []netip.Addr, now time.Time) (pair tls.Certificate, remake string) {
	ki, err := os.Stat(keyPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return pair, "no key yet"
	case err != nil:
		return pair, err.Error()
	case !ki.Mode().IsRegular():
		return pair, fmt.Sprintf("key %s is not a regular file", keyPath)
	case ki.Mode().Perm()&0o077 != 0:
		// ours, so no one else's choice: a key others could read is burnt
		return pair, fmt.Sprintf("key mode %04o is readable by group or others", ki.Mode().Perm())
	}
	pair, err = loadPair(certPath, keyPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return tls.Certificate{}, "no certificate yet"
		}
		return tls.Certificate{}, err.Error()
	}
	leaf := pair.Leaf
	haveNames, haveAddrs := leafSANs(leaf)
	switch {
	case !slices.Equal(haveNames, names) || !slices.Equal(haveAddrs, addrs):
		remake = fmt.Sprintf("names changed from %s to %s",
			strings.Join(sanStrings(haveNames, haveAddrs), ","), strings.Join(sanStrings(names, addrs), ","))
	case now.Before(leaf.NotBefore):
		remake = fmt.Sprintf("not valid before %s (the clock went back?)", leaf.NotBefore.Format(time.RFC3339))
	case leaf.NotAfter.Sub(now) < selfCertRenew:
		remake = fmt.Sprintf("expires %s, fewer than %d days from now",
			leaf.NotAfter.Format(time.RFC3339), int(selfCertRenew/(24*time.Hour)))
	}
	if remake != "" {
		return tls.Certificate{}, remake
	}
	return pair, ""
}

// makeSelfSigned makes a new key and a certificate for names and addrs,
// both PEM-encoded, with cn as its subject's common name.
func makeSelfSigned(cn string, names []string, addrs []netip.Addr, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	notBefore := now.Add(-selfCertBackdate).UTC().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"virtcon web terminal"}},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(selfCertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		DNSNames:              names,
	}
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// commonName is what the subject of a self-made certificate is called
// (browsers ignore it, people read it): the first name given that is not
// "localhost", else "localhost", else the first address.
func commonName(names []string, addrs []netip.Addr) string {
	local := ""
	for _, n := range names {
		switch n = normalName(n); n {
		case "":
		case "localhost":
			local = n
		default:
			return n
		}
	}
	if local == "" && len(addrs) > 0 {
		return addrs[0].String()
	}
	return local
}

// randomSerial is a positive random 128-bit serial number.
func randomSerial() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("serial number: %w", err)
		}
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n, nil
		}
	}
}

// loadPair reads and checks a certificate and key, with errors naming the
// file at fault: a certificate file without a parsable certificate, a key
// file without a parsable key, or a key that is not the certificate's.
func loadPair(certPath, keyPath string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, &CertError{Path: certPath, Err: err}
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return tls.Certificate{}, &CertError{Path: keyPath, Err: err}
	}
	if err := checkCertPEM(certPEM); err != nil {
		return tls.Certificate{}, &CertError{Path: certPath, Err: err}
	}
	if err := checkKeyPEM(keyPEM); err != nil {
		return tls.Certificate{}, &CertError{Path: keyPath, Err: err}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &CertError{Path: keyPath, Err: fmt.Errorf("not the key of %s: %w", certPath, err)}
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, &CertError{Path: certPath, Err: err}
		}
	}
	return pair, nil
}

// checkCertPEM says what is wrong with a certificate file: no PEM
// certificate in it, or one that does not parse.
func checkCertPEM(data []byte) error {
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		n++
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n, err)
		}
	}
	if n == 0 {
		return errors.New("no PEM certificate in it")
	}
	return nil
}

// checkKeyPEM says what is wrong with a key file: no PEM private key in
// it, or one that does not parse.
func checkKeyPEM(data []byte) error {
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return errors.New("no PEM private key in it")
		}
		if b.Type != "PRIVATE KEY" && !strings.HasSuffix(b.Type, " PRIVATE KEY") {
			continue
		}
		if _, err := parsePrivateKey(b.Bytes); err != nil {
			return fmt.Errorf("%s: %w", strings.ToLower(b.Type), err)
		}
		return nil
	}
}

// parsePrivateKey accepts the encodings crypto/tls does.
func parsePrivateKey(der []byte) (crypto.PrivateKey, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		switch k.(type) {
		case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
			return k, nil
		}
		return nil, fmt.Errorf("unsupported key type %T", k)
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("not a PKCS #8, PKCS #1 or SEC 1 private key")
}

func newCert(pair tls.Certificate, source, certPath string) *Cert {
	leaf := pair.Leaf
	names, addrs := leafSANs(leaf)
	return &Cert{
		TLS:        pair,
		SHA256:     certFingerprint(leaf.Raw),
		SPKISHA256: spkiFingerprint(leaf.RawSubjectPublicKeyInfo),
		SANs:       sanStrings(names, addrs),
		Source:     source,
		NotAfter:   leaf.NotAfter,
		CertFile:   certPath,
	}
}

// certFingerprint is sha256(der) as uppercase hex pairs joined by colons.
func certFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	var b bytes.Buffer
	for i, x := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", x)
	}
	return b.String()
}

// spkiFingerprint is base64(sha256(spki)).
func spkiFingerprint(spki []byte) string {
	sum := sha256.Sum256(spki)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// wantedSANs normalises the names and addresses a self-made certificate
// carries: lower case, no trailing dot, IPv4-mapped addresses unmapped,
// zones dropped, sorted, without duplicates.
func wantedSANs(names []string, addrs []netip.Addr) ([]string, []netip.Addr, error) {
	var ns []string
	for _, n := range names {
		n = normalName(n)
		if n == "" {
			continue
		}
		if !validDNSName(n) {
			return nil, nil, fmt.Errorf("web terminal certificate: name %q: not a DNS name", n)
		}
		ns = append(ns, n)
	}
	var as []netip.Addr
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		as = append(as, a.Unmap().WithZone(""))
	}
	ns, as = sortSANs(ns, as)
	if len(ns) == 0 && len(as) == 0 {
		return nil, nil, errors.New("web terminal certificate: no names or addresses to make it for")
	}
	return ns, as, nil
}

// leafSANs are a certificate's DNS and IP names, normalised like
// wantedSANs'.
func leafSANs(leaf *x509.Certificate) ([]string, []netip.Addr) {
	var ns []string
	for _, n := range leaf.DNSNames {
		if n = normalName(n); n != "" {
			ns = append(ns, n)
		}
	}
	var as []netip.Addr
	for _, ip := range leaf.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			as = append(as, a.Unmap())
		}
	}
	return sortSANs(ns, as)
}

func normalName(n string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(n), "."))
}

func sortSANs(ns []string, as []netip.Addr) ([]string, []netip.Addr) {
	slices.Sort(ns)
	ns = slices.Compact(ns)
	slices.SortFunc(as, netip.Addr.Compare)
	as = slices.Compact(as)
	return ns, as
}

func sanStrings(ns []string, as []netip.Addr) []string {
	out := slices.Clone(ns)
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// validDNSName accepts host names as they appear in practice: labels of
// letters, digits, '-' and '_' (some hosts have one), joined by dots.
// Anything else would not be a name a browser could have typed.
func validDNSName(n string) bool {
	if len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
