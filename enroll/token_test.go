package enroll

import (
	"strings"
	"testing"
)

func TestNewToken(t *testing.T) {
	const n = 5000
	seen := make(map[string]bool, 2*n)
	counts := make(map[rune]int)
	for range n {
		id, secret, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != IDLen || len(secret) != SecretLen {
			t.Fatalf("got id %d and secret %d characters; want %d and %d", len(id), len(secret), IDLen, SecretLen)
		}
		if _, _, err := SplitToken(id + "." + secret); err != nil {
			t.Fatalf("SplitToken refuses a new token: %v", err)
		}
		if seen[id] || seen[secret] {
			t.Fatalf("id %q or its secret repeated after %d tokens", id, len(seen)/2)
		}
		seen[id], seen[secret] = true, true
		for _, c := range id + secret {
			counts[c]++
		}
	}
	// 200000 characters over 36: about 5556 each (sd ~73); a biased
	// draw (byte%36 without rejection) gives 'a'-'d' ~6250, the others
	// ~5469. The bounds are 4.5 sd: a false failure is ~1 in 4000 runs.
	if len(counts) != len(tokenAlphabet) {
		t.Errorf("got %d distinct characters; want %d", len(counts), len(tokenAlphabet))
	}
	for c, k := range counts {
		if !strings.ContainsRune(tokenAlphabet, c) {
			t.Errorf("character %q outside a-z0-9", c)
		}
		if k < 5226 || k > 5886 {
			t.Errorf("character %q drawn %d times of 200000; want about 5556", c, k)
		}
	}
}

func TestSecretMatches(t *testing.T) {
	h := HashSecret(testSecret)
	if len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("HashSecret = %q; want 64 lowercase hex digits", h)
	}
	if HashSecret(testSecret) != h {
		t.Fatal("HashSecret is not deterministic")
	}
	tests := []struct {
		name, secret, hash string
		want               bool
	}{
		{"right", testSecret, h, true},
		{"other secret", testSecret[:31] + "x", h, false},
		{"empty secret", "", h, false},
		{"empty hash", testSecret, "", false},
		{"upper-case hash", testSecret, strings.ToUpper(h), false},
		{"secret as hash", testSecret, testSecret, false},
	}
	for _, tt := range tests {
		if got := SecretMatches(tt.secret, tt.hash); got != tt.want {
			t.Errorf("%s: SecretMatches = %v; want %v", tt.name, got, tt.want)
		}
	}
}
