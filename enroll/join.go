package enroll

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
)

// JoinPrefix starts every join string; the 1 is the version of its
// format.
const JoinPrefix = "vcj1:"

// Lengths of a token's parts. Both use the alphabet a-z0-9; the secret's
// 32 characters carry about 165 bits.
const (
	IDLen     = 8
	SecretLen = 32
)

const pinPrefix = "sha256:"

// ErrBadJoin is wrapped by every error about a malformed join string or
// token (*JoinError).
var ErrBadJoin = errors.New("bad join string")

// JoinError says which part of a join string or token is wrong. Its
// message never contains the secret, nor any part that could be it.
type JoinError struct {
	Part   string // prefix, id, secret, address, pin
	Reason string
	token  bool // from SplitToken: the message says token, not join string
}

func (e *JoinError) Error() string {
	what := "join string"
	if e.token {
		what = "token"
	}
	return what + ": " + e.Part + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrBadJoin) true.
func (e *JoinError) Unwrap() error { return ErrBadJoin }

// Join is a parsed, valid join string. The zero Join is not valid.
type Join struct {
	id, secret string
	host, port string // host without brackets
	pin        string // "sha256:<hex>" or ""
}

// ParseJoin parses vcj1:<id>.<secret>@<host>:<port>[#sha256:<hex>],
// ignoring surrounding white space (a pasted line's newline). The host is
// a DNS name, an IPv4 address or a bracketed IPv6 address; the port is
// required. A missing pin is no error here: the caller decides whether it
// may go on without one (VerifyPinned refuses with ErrNoPin).
func ParseJoin(s string) (Join, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, JoinPrefix)
	if !ok {
		return Join{}, &JoinError{Part: "prefix", Reason: fmt.Sprintf("want it to start with %q", JoinPrefix)}
	}
	// The token's alphabet has neither '#' nor '@': the pin follows the
	// last '#', the address the first '@', so a malformed secret never
	// lands in a part that an error message quotes.
	pin := ""
	if i := strings.LastIndexByte(rest, '#'); i >= 0 {
		rest, pin = rest[:i], rest[i+1:]
		if pin == "" {
			return Join{}, &JoinError{Part: "pin", Reason: "empty after '#' (want sha256:<64 lowercase hex digits>, or no '#')"}
		}
	}
	tok, addr, ok := strings.Cut(rest, "@")
	if !ok {
		return Join{}, &JoinError{Part: "address", Reason: "missing (want <id>.<secret>@<host>:<port>)"}
	}
	id, secret, err := splitToken(tok)
	if err != nil {
		return Join{}, err
	}
	return newJoin(id, secret, addr, pin)
}

// NewJoin builds a Join from its parts (addr is host:port, an IPv6 host
// bracketed; pin is sha256:<hex> or ""), validated as ParseJoin does.
func NewJoin(id, secret, addr, pin string) (Join, error) {
	if err := checkID(id); err != nil {
		return Join{}, err
	}
	if err := checkSecret(secret); err != nil {
		return Join{}, err
	}
	return newJoin(id, secret, addr, pin)
}

func newJoin(id, secret, addr, pin string) (Join, error) {
	host, port, err := checkAddr(addr)
	if err != nil {
		return Join{}, err
	}
	if pin != "" {
		if err := checkPin(pin); err != nil {
			return Join{}, err
		}
	}
	return Join{id: id, secret: secret, host: host, port: port, pin: pin}, nil
}

// ID is the token's public half: it names the token in lists and audits.
func (j Join) ID() string { return j.id }

// Secret is the token's secret half, the only accessor that returns it.
func (j Join) Secret() string { return j.secret }

// Token is "<id>.<secret>", what EnrollRequest.token carries. It holds
// the secret: never log it.
func (j Join) Token() string { return j.id + "." + j.secret }

// Addr is the director's host:port, an IPv6 host bracketed.
func (j Join) Addr() string { return net.JoinHostPort(j.host, j.port) }

// Host is the director's host without port or brackets: the name its
// serving certificate must be valid for.
func (j Join) Host() string { return j.host }

// Pin is "sha256:<hex>" of the director's root CA public key, or "".
func (j Join) Pin() string { return j.pin }

// Format is the whole join string, secret included: what token create
// prints, once.
func (j Join) Format() string { return j.format(j.secret) }

// String is the join string with the secret masked.
func (j Join) String() string { return j.format("********") }

// GoString masks the secret for %#v too.
func (j Join) GoString() string { return "enroll.Join(" + j.String() + ")" }

// LogValue masks the secret in slog records.
func (j Join) LogValue() slog.Value { return slog.StringValue(j.String()) }

func (j Join) format(secret string) string {
	s := JoinPrefix + j.id + "." + secret + "@" + j.Addr()
	if j.pin != "" {
		s += "#" + j.pin
	}
	return s
}

// SplitToken splits "<id>.<secret>" and checks both parts. Its errors
// (*JoinError, wrapping ErrBadJoin) never contain the secret.
func SplitToken(tok string) (id, secret string, err error) {
	id, secret, err = splitToken(tok)
	var je *JoinError
	if errors.As(err, &je) {
		je.token = true
	}
	return id, secret, err
}

func splitToken(tok string) (id, secret string, err error) {
	id, secret, ok := strings.Cut(tok, ".")
	if !ok {
		// Without the '.', what is there may well be the secret alone.
		return "", "", &JoinError{Part: "id", Reason: "missing '.' between id and secret (want <id>.<secret>)"}
	}
	if err := checkID(id); err != nil {
		return "", "", err
	}
	if err := checkSecret(secret); err != nil {
		return "", "", err
	}
	return id, secret, nil
}

// checkID does not quote a bad id: a pasted secret may sit in its place.
func checkID(id string) error {
	if len(id) != IDLen {
		return &JoinError{Part: "id", Reason: fmt.Sprintf("want %d characters a-z0-9, got %d", IDLen, len(id))}
	}
	if !isToken(id) {
		return &JoinError{Part: "id", Reason: "want only the characters a-z0-9"}
	}
	return nil
}

func checkSecret(secret string) error {
	if len(secret) != SecretLen {
		return &JoinError{Part: "secret", Reason: fmt.Sprintf("want %d characters a-z0-9, got %d", SecretLen, len(secret))}
	}
	if !isToken(secret) {
		return &JoinError{Part: "secret", Reason: "want only the characters a-z0-9"}
	}
	return nil
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func checkAddr(addr string) (host, port string, err error) {
	bad := func(reason string) (string, string, error) {
		return "", "", &JoinError{Part: "address", Reason: fmt.Sprintf("%q: %s", addr, reason)}
	}
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return bad("want host:port, an IPv6 host in brackets")
	}
	if !validPort(port) {
		return bad("want a port 1-65535")
	}
	if strings.HasPrefix(addr, "[") {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return bad("want an IPv6 address without zone in the brackets")
		}
		return host, port, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		return host, port, nil
	}
	if !validDNSName(host) {
		return bad("want a DNS name, an IPv4 address or [IPv6]")
	}
	return host, port, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n >= 1 && n <= 65535
}

// validDNSName accepts letter-digit-hyphen labels (RFC 1123), 1-63
// characters each, 253 in all, with a last label that is not all digits
// (so that 10.0.0 is no name).
func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

func checkPin(pin string) error {
	hex, ok := strings.CutPrefix(pin, pinPrefix)
	if !ok {
		return &JoinError{Part: "pin", Reason: "want it to start with " + pinPrefix}
	}
	if len(hex) != 64 {
		return &JoinError{Part: "pin", Reason: fmt.Sprintf("want 64 lowercase hex digits after %s, got %d characters", pinPrefix, len(hex))}
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return &JoinError{Part: "pin", Reason: "want only lowercase hex digits 0-9a-f after " + pinPrefix}
		}
	}
	return nil
}
