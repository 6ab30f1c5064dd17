package enroll

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
)

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewToken makes a token's id (IDLen characters) and secret (SecretLen)
// from crypto/rand over a-z0-9, each character uniform.
func NewToken() (id, secret string, err error) {
	b, err := randomText(IDLen + SecretLen)
	if err != nil {
		return "", "", fmt.Errorf("new token: %w", err)
	}
	return b[:IDLen], b[IDLen:], nil
}

// randomText draws n characters of tokenAlphabet. Bytes from 252 up are
// dropped (252 = 7*36), so byte%36 is uniform: no character is likelier.
func randomText(n int) (string, error) {
	const limit = 256 - 256%len(tokenAlphabet)
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/4+8)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, c := range buf {
			if int(c) < limit && len(out) < n {
				out = append(out, tokenAlphabet[int(c)%len(tokenAlphabet)])
			}
		}
	}
	return string(out), nil
}

// HashSecret is the lowercase hex SHA-256 of a token secret, what the
// director stores instead of the secret. A plain hash is enough: the
// secret is random with about 165 bits, not a password.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// SecretMatches reports whether secret hashes to hashHex, in time that
// does not depend on where they differ.
func SecretMatches(secret, hashHex string) bool {
	return subtle.ConstantTimeCompare([]byte(HashSecret(secret)), []byte(hashHex)) == 1
}
