package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteSeed(t *testing.T) {
	t.Parallel()
	const secret = "#cloud-config\nchpasswd: {list: 'root:s3cr3t-Pa55'}\n"
	tests := []struct {
		name    string
		ci      *CloudInit
		want    []string // verbatim in the image
		notWant []string
	}{
		{"defaults", nil,
			[]string{"instance-id: " + testUID + "\nlocal-hostname: web\n", "#cloud-config\n{}\n", "cidata"},
			[]string{"network-config"}},
		{"user instance-id replaced", &CloudInit{MetaData: "instance-id: evil\nlocal-hostname: other\n", UserData: secret},
			[]string{"instance-id: " + testUID + "\nlocal-hostname: other\n", secret},
			[]string{"evil", "local-hostname: web"}},
		{"spaced keys replaced", &CloudInit{MetaData: "instance-id : evil1\ninstance-id:\tevil2\nlocal-hostname: h\n"},
			[]string{"instance-id: " + testUID + "\n", "local-hostname: h\n"},
			[]string{"evil1", "evil2"}},
		{"quoted keys replaced", &CloudInit{MetaData: "\"instance-id\": evil1\n'instance-id': evil2\nlocal-hostname: h\n"},
			[]string{"instance-id: " + testUID + "\n", "local-hostname: h\n"},
			[]string{"evil1", "evil2"}},
		{"similar keys kept", &CloudInit{MetaData: "instance-id-old: keep1\nmy-instance-id: keep2\n"},
			[]string{"instance-id: " + testUID + "\n", "instance-id-old: keep1\n", "my-instance-id: keep2\n"}, nil},
		{"user data only", &CloudInit{UserData: secret},
			[]string{"instance-id: " + testUID + "\nlocal-hostname: web\n", secret}, []string{"{}\n"}},
		{"network config", &CloudInit{NetworkConfig: "version: 2\nethernets: {eth0: {dhcp4: true}}\n"},
			[]string{"version: 2\nethernets: {eth0: {dhcp4: true}}\n", "#cloud-config\n{}\n"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm := &VirtualMachine{Metadata: Metadata{Name: "web", UID: testUID}, Spec: Spec{CloudInit: tt.ci}}
			path := filepath.Join(t.TempDir(), "seed.iso")
			if err := writeSeed(path, vm); err != nil {
				t.Fatalf("writeSeed: %v", err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("mode: got %v; want 0600", st.Mode().Perm())
			}
			if st.Size()%2048 != 0 || st.Size() < 16*2048 {
				t.Errorf("size: got %d; want whole 2048-byte sectors past the system area", st.Size())
			}
			img, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !bytes.Contains(img, []byte(w)) {
					t.Errorf("image: got no %q; want it verbatim", w)
				}
			}
			for _, w := range tt.notWant {
				if bytes.Contains(img, []byte(w)) {
					t.Errorf("image: got %q; want it absent", w)
				}
			}
			if n := bytes.Count(img, []byte("instance-id: "+testUID)); n != 1 {
				t.Errorf("instance-id lines: got %d; want 1", n)
			}
			// The same seed again leaves the file as it is.
			if err := writeSeed(path, vm); err != nil {
				t.Fatalf("second writeSeed: %v", err)
			}
			if again, _ := os.ReadFile(path); !bytes.Equal(again, img) {
				t.Errorf("second writeSeed: got a different image; want the same bytes")
			}
		})
	}
}

func TestStripInstanceID(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"instance-id: a\nlocal-hostname: b\n": "local-hostname: b\n\n",
		"local-hostname: b":                   "local-hostname: b\n",
		"\"instance-id\": a\n":                "\n",
		"instance-ids: a\n":                   "instance-ids: a\n\n",
	}
	for in, want := range tests {
		if got := stripInstanceID(in); got != want {
			t.Errorf("stripInstanceID(%q): got %q; want %q", in, got, want)
		}
	}
	if got := stripInstanceID("a: 1\ninstance-id: x\nb: 2\n"); strings.Contains(got, "instance-id") {
		t.Errorf("got %q; want no instance-id", got)
	}
}
