package ca

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// KEKSize is the size of the key encryption key: AES-256.
const KEKSize = 32

const (
	aadPrefix = "virtcon-director/v1 "
	nameRoot  = "root"
	nameInter = "intermediate"
)

// aad binds a sealed key to its name and to its certificate, so that a
// blob opened in the wrong slot, or next to another CA's certificate,
// fails authentication instead of yielding a key that signs for the
// wrong certificate.
func aad(name string, certDER []byte) []byte {
	sum := sha256.Sum256(certDER)
	return []byte(aadPrefix + name + " " + hex.EncodeToString(sum[:]))
}

func checkKEK(kek []byte) error {
	if len(kek) != KEKSize {
		return fmt.Errorf("ca: key encryption key is %d bytes, want %d", len(kek), KEKSize)
	}
	return nil
}

func newGCM(kek []byte) (cipher.AEAD, error) {
	if err := checkKEK(kek); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, fmt.Errorf("ca: key encryption key: %w", err)
	}
	return cipher.NewGCM(block)
}

// seal returns nonce || ciphertext of plain under kek.
func seal(kek []byte, name string, certDER, plain []byte) ([]byte, error) {
	g, err := newGCM(kek)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize(), g.NonceSize()+len(plain)+g.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("ca: seal %s key: %w", name, err)
	}
	return g.Seal(nonce, nonce, plain, aad(name, certDER)), nil
}

// unseal opens a blob made by seal. Every failure that can mean a wrong
// KEK or an altered or misplaced blob wraps ErrSealed and names the key.
func unseal(kek []byte, name string, certDER, blob []byte) ([]byte, error) {
	g, err := newGCM(kek)
	if err != nil {
		return nil, err
	}
	if len(blob) < g.NonceSize()+g.Overhead() {
		return nil, fmt.Errorf("ca: %s key: sealed blob is %d bytes, too short: %w", name, len(blob), ErrSealed)
	}
	nonce, ct := blob[:g.NonceSize()], blob[g.NonceSize():]
	plain, err := g.Open(nil, nonce, ct, aad(name, certDER))
	if err != nil {
		return nil, fmt.Errorf("ca: %s key: %w", name, ErrSealed)
	}
	return plain, nil
}

func zero(b []byte) { clear(b) }
