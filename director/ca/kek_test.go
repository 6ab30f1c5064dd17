package ca

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateKEKCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "sub")
	path := filepath.Join(dir, "ca.kek")
	kek, err := LoadOrCreateKEK(path)
	if err != nil {
		t.Fatalf("LoadOrCreateKEK: %v", err)
	}
	if len(kek) != KEKSize {
		t.Fatalf("got %d bytes, want %d", len(kek), KEKSize)
	}
	if bytes.Equal(kek, make([]byte, KEKSize)) {
		t.Fatal("KEK is all zero")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("file mode %04o, want 0600", st.Mode().Perm())
	}
	dst, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %04o, want 0700", dst.Mode().Perm())
	}
	onDisk, _ := os.ReadFile(path)
	if !bytes.Equal(onDisk, kek) {
		t.Error("file content differs from the KEK returned")
	}
	again, err := LoadOrCreateKEK(path)
	if err != nil || !bytes.Equal(again, kek) {
		t.Errorf("second LoadOrCreateKEK = %x, %v; want the same key back", again, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want only ca.kek (no temp files)", names)
	}
	other, err := LoadOrCreateKEK(filepath.Join(dir, "other.kek"))
	if err != nil || bytes.Equal(other, kek) {
		t.Errorf("a second file's KEK = %x, %v; want a different key", other, err)
	}
}

func TestLoadOrCreateKEKRacers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.kek")
	const n = 16
	keys := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { keys[i], errs[i] = LoadOrCreateKEK(path) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("racer %d got another key than racer 0: one overwrote the other", i)
		}
	}
	onDisk, _ := os.ReadFile(path)
	if !bytes.Equal(onDisk, keys[0]) {
		t.Error("file holds another key than the racers got")
	}
}

func TestLoadOrCreateKEKRefuses(t *testing.T) {
	good := bytes.Repeat([]byte{0x5a}, KEKSize)
	for _, tc := range []struct {
		name    string
		content []byte
		mode    os.FileMode
		dir     bool
		want    string
	}{
		{"31 bytes", good[:31], 0o600, false, "31 bytes, want 32"},
		{"33 bytes", append(append([]byte(nil), good...), 0), 0o600, false, "33 bytes, want 32"},
		{"empty", nil, 0o600, false, "0 bytes, want 32"},
		{"pem text", []byte("-----BEGIN KEY-----\nabc\n-----END KEY-----\n"), 0o600, false, "bytes, want 32"},
		{"0644", good, 0o644, false, "mode 0644: readable or writable by group or other"},
		{"0640", good, 0o640, false, "mode 0640"},
		{"0604", good, 0o604, false, "mode 0604"},
		{"0620", good, 0o620, false, "mode 0620"},
		{"a directory", nil, 0o700, true, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ca.kek")
			if tc.dir {
				if err := os.Mkdir(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := os.WriteFile(path, tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			kek, err := LoadOrCreateKEK(path)
			if err == nil {
				t.Fatalf("LoadOrCreateKEK accepted it (%d bytes); want an error containing %q", len(kek), tc.want)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to name %s and contain %q", err, path, tc.want)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tc.mode {
				t.Errorf("mode now %04o, want it left at %04o", st.Mode().Perm(), tc.mode)
			}
			if !tc.dir {
				b, _ := os.ReadFile(path)
				if !bytes.Equal(b, tc.content) {
					t.Errorf("file now %x, want it left as %x", b, tc.content)
				}
			}
		})
	}
	t.Run("0400 is fine", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ca.kek")
		if err := os.WriteFile(path, good, 0o400); err != nil {
			t.Fatal(err)
		}
		kek, err := LoadOrCreateKEK(path)
		if err != nil || !bytes.Equal(kek, good) {
			t.Errorf("LoadOrCreateKEK = %x, %v; want the file's key", kek, err)
		}
	})
}
