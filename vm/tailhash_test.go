package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// The hash taken while a writer fills the file is the whole file's: what
// was there when it started, what came while it ran, and what came after
// the last read before finish.
func TestTailHash(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stream")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	chunk := make([]byte, 300<<10)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	w.Write(chunk[:1000]) // before the hasher starts
	th, err := startTailHash(p)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	want.Write(chunk[:1000])
	for i := range 40 {
		chunk[0] = byte(i)
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		want.Write(chunk)
	}
	size, sum, err := th.finish()
	if err != nil {
		t.Fatal(err)
	}
	th.stop() // after finish: nothing
	if size != 1000+40*int64(len(chunk)) || sum != hex.EncodeToString(want.Sum(nil)) {
		t.Errorf("tail hash: %d bytes, %s; want %d bytes, the file's sha256", size, sum, 1000+40*len(chunk))
	}
	if s2, sum2, err := hashFile(p); err != nil || s2 != size || sum2 != sum {
		t.Errorf("hashFile afterwards: %d %s %v; want the same", s2, sum2, err)
	}
}

// A save that fails stops the hasher; nothing is left running.
func TestTailHashStop(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stream")
	if err := os.WriteFile(p, []byte("QEVM"), 0o600); err != nil {
		t.Fatal(err)
	}
	th, err := startTailHash(p)
	if err != nil {
		t.Fatal(err)
	}
	th.stop()
	th.stop()
}
