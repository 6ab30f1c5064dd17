//go:build integration

package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// serve serves handler on loopback and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func TestIntegrationImagePull(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed (apt-get install qemu-utils)")
	}
	img := make([]byte, 4<<20) // a raw disk of zeros
	copy(img[510:], []byte{0x55, 0xaa})
	sum := sha256.Sum256(img)
	good := hex.EncodeToString(sum[:])
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/disk.raw":
			w.Write(img)
		case "/stall.raw":
			// half the image, then nothing: a download that never ends
			w.Header().Set("Content-Length", "4194304")
			w.Write(img[:2<<20])
			w.(http.Flusher).Flush()
			<-stall
		default:
			http.NotFound(w, r)
		}
	}))
	root := vmRoot(t)

	// a wrong checksum is refused and leaves nothing behind
	r := virt(t, nil, "--root", root, "image", "pull", base+"/disk.raw", "--name", "bad", "--sha256", strings.Repeat("0", 64))
	if r.code == 0 || !strings.Contains(r.stderr, "sha256") {
		t.Errorf("pull with a wrong sha256: exit %d, stderr %q; want a sha256 error", r.code, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "var/lib/virtcon/images/*")); len(left) > 0 {
		t.Errorf("a rejected pull left %v", left)
	}

	v(t, root, "image", "pull", base+"/disk.raw", "--name", "zeros", "--sha256", good)
	var imgs []vm.Image
	json.Unmarshal([]byte(v(t, root, "image", "list", "-o", "json")), &imgs)
	if len(imgs) != 1 || imgs[0].Name != "zeros" || imgs[0].SHA256 != good || imgs[0].Format != "raw" {
		t.Fatalf("image list %+v; want one raw image zeros with sha256 %s", imgs, good)
	}

	// an unreachable URL: a clear error, nothing left
	if r := virt(t, nil, "--root", root, "image", "pull", base+"/missing.raw", "--name", "missing"); r.code == 0 || !strings.Contains(r.stderr, "404") {
		t.Errorf("pull of a 404: exit %d, %q", r.code, r.stderr)
	}

	// a download killed halfway leaves no marker and no usable image
	cmd := exec.Command(virtBin, "--root", root, "image", "pull", base+"/stall.raw", "--name", "half")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(root, "var/lib/virtcon/images/.half.img.partial")
	for i := 0; i < 100; i++ {
		if st, err := os.Stat(partial); err == nil && st.Size() > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if fileExists(filepath.Join(root, "var/lib/virtcon/images/half.img.sha256")) || fileExists(filepath.Join(root, "var/lib/virtcon/images/half.img")) {
		t.Error("a killed download left an image or a marker")
	}
	json.Unmarshal([]byte(v(t, root, "image", "list", "-o", "json")), &imgs)
	if len(imgs) != 1 {
		t.Errorf("after a killed pull, %d images listed; want only zeros", len(imgs))
	}
	if out := v(t, root, "vm", "gc", "--dry-run"); !strings.Contains(out, ".half.img.partial") {
		t.Errorf("gc --dry-run does not list the partial download:\n%s", out)
	}

	// an image in use cannot be removed; overlays are made on it
	v(t, root, "vm", "create", "u1", "--image", "zeros", "--disk", "8M", "--firmware", "bios")
	if r := virt(t, nil, "--root", root, "image", "rm", "zeros"); r.code == 0 || !strings.Contains(r.stderr, "in use") {
		t.Errorf("rm of an image in use: exit %d, %q", r.code, r.stderr)
	}
	v(t, root, "vm", "delete", "u1")
	v(t, root, "image", "rm", "zeros")

	// an image that references another file is refused: it could expose any host file to a guest
	dir := t.TempDir()
	backed := filepath.Join(dir, "backed.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/etc/hostname", backed).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	if r := virt(t, nil, "--root", root, "image", "import", backed); r.code == 0 || !strings.Contains(r.stderr, "backing file") {
		t.Errorf("import of an image with a backing file: exit %d, %q; want refused", r.code, r.stderr)
	}
	plain := filepath.Join(dir, "plain.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", plain, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	v(t, root, "image", "import", plain, "--name", "plain")
	json.Unmarshal([]byte(v(t, root, "image", "list", "-o", "json")), &imgs)
	if len(imgs) != 1 || imgs[0].Name != "plain" || imgs[0].Format != "qcow2" {
		t.Errorf("after import: %+v", imgs)
	}
}
