package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// A typed user name is whatever the operator typed into the User field,
// and that is sometimes the password. Like login(1), Login records a name
// that is not a known account as "UNKNOWN", in the audit log and on the
// logger, followed by a short keyed hash of it so that repeated attempts
// with one name can still be told apart from others ("UNKNOWN:1f2e3d4c");
// the failure state holds a keyed hash of every name, known or not.

// unknownUser stands for a name that is not a known account. The colon
// after it cannot occur in a name in /etc/passwd.
const unknownUser = "UNKNOWN"

// nameKeyFile, under RunDir, holds the random key of those hashes. It is
// made on first use and lives as long as the failure state: a reboot
// (RunDir is a tmpfs) draws a new key.
const (
	nameKeyFile = "auth-names.key"
	nameKeyLen  = 32
)

// loginName is a typed user name as Login records it.
type loginName struct {
	// shown goes to the audit log and the logger: the name when it is a
	// known account, else "UNKNOWN:" and the first 8 hex digits of key,
	// or "UNKNOWN" alone when the host key is unavailable.
	shown string
	// key is the failure record's key on the local consoles: the
	// HMAC-SHA256 of the name under the host key, in hex; "" when the
	// host key is unavailable.
	key string
	// webKey is the name's failure record's key for web logins, a keyed
	// hash like key's of a string no typed name can be (see limitKeys).
	webKey string
}

// loginName classifies typed: a known account is one the user database
// (LookupUID) answers for; any error, not only "unknown user", makes it
// UNKNOWN, since what cannot be looked up cannot be shown to be a name.
func (a *Authenticator) loginName(ctx context.Context, typed string) (loginName, error) {
	known := false
	if invalidUser(typed) == "" {
		_, err := a.lookupUID(typed)
		known = err == nil
	}
	n := loginName{shown: unknownUser}
	if known {
		n.shown = typed
	}
	key, err := a.limiter().nameKey(ctx)
	if err != nil {
		return n, err
	}
	n.key = nameMAC(key, typed)
	n.webKey = nameMAC(key, "\x00web-user\x00"+typed)
	if !known {
		n.shown = unknownUser + ":" + n.key[:8]
	}
	return n, nil
}

// sourceKey is the failure record's key of the source address addr: a
// keyed hash like a name's, of a string no typed name can be (a name with
// a control character never reaches the limiter), of sourceOf(addr).
func (l *limiter) sourceKey(ctx context.Context, addr string) (string, error) {
	key, err := l.nameKey(ctx)
	if err != nil {
		return "", err
	}
	return nameMAC(key, "\x00source\x00"+sourceOf(addr)), nil
}

// sourceIPv6Bits is the prefix an IPv6 source is counted by: one host (or
// one customer of a provider) is given a whole /64 and can pick a fresh
// address in it for every guess.
const sourceIPv6Bits = 64

// sourceOf is what the rate limit counts a source address as: an IPv4
// address itself (also written IPv4-mapped, ::ffff:192.0.2.7), an IPv6
// address by its /64 (the zone dropped), and anything else as given.
func sourceOf(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(sourceIPv6Bits)
	if err != nil {
		return addr // cannot happen: an IPv6 address has 128 bits
	}
	return p.String()
}

func nameMAC(key []byte, name string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(name))
	return hex.EncodeToString(m.Sum(nil))
}

func (l *limiter) nameKeyPath() string { return filepath.Join(l.dir, nameKeyFile) }

// nameKey returns the host key, making it on first use. Every console must
// use the same key, or their failure records would not meet: it is made
// under the state's lock and written atomically, so a reader without the
// lock sees no key or the whole key.
func (l *limiter) nameKey(ctx context.Context) ([]byte, error) {
	if k, err := os.ReadFile(l.nameKeyPath()); err == nil && len(k) == nameKeyLen {
		return k, nil
	}
	var key []byte
	err := l.locked(ctx, func() error {
		k, err := os.ReadFile(l.nameKeyPath())
		switch {
		case err == nil && len(k) == nameKeyLen:
			key = k
			return nil
		case err == nil:
			// Replacing it orphans the records made under the old key;
			// prune forgets them.
			l.log.Warn("login name key damaged; making a new one", "path", l.nameKeyPath(), "len", len(k))
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("login name key: %w", err)
		}
		k = make([]byte, nameKeyLen)
		rand.Read(k) // never fails (crypto/rand, Go 1.24+)
		if err := atomicfile.WriteVolatile(l.nameKeyPath(), k, 0o600); err != nil {
			return fmt.Errorf("login name key: %w", err)
		}
		key = k
		return nil
	})
	return key, err
}
