package vm

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestCreateOverlay: an overlay createOverlay writes is, for qemu-img, the
// image `qemu-img create -f qcow2 -u -b` makes (same info, check clean),
// and reads and writes through to its backing file as one.
func TestCreateOverlay(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command(m.opts.QEMUImg, "create", "-q", "-f", "qcow2", base, "8M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	cloneIO(t, base, "write -P 0x61 0 1M")
	info := func(p string) map[string]any {
		t.Helper()
		out, err := exec.Command(m.opts.QEMUImg, "info", "-U", "--output=json", p).Output()
		if err != nil {
			t.Fatalf("qemu-img info %s: %v", p, err)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"filename", "actual-size", "dirty-flag"} {
			delete(v, k)
		}
		b, _ := json.Marshal(v)
		var back map[string]any
		json.Unmarshal(b, &back)
		return back
	}
	for _, size := range []int64{8 << 20, 1000000, 1 << 30, 3<<30 + 512, 4 << 40} {
		t.Run(strconv.FormatInt(size, 10), func(t *testing.T) {
			ours, theirs := filepath.Join(dir, "ours-"+strconv.FormatInt(size, 10)), filepath.Join(dir, "theirs-"+strconv.FormatInt(size, 10))
			if err := createOverlay(ours, base, size); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(m.opts.QEMUImg, "create", "-q", "-f", "qcow2", "-u", "-b", base, "-F", "qcow2", theirs, strconv.FormatInt(size, 10)).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img create: %v: %s", err, out)
			}
			a, b := info(ours), info(theirs)
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Errorf("qemu-img info:\nours   %s\ntheirs %s", ja, jb)
			}
			cloneImgCheck(t, ours)
			if !readsPattern(t, ours, 0x61, "0", "512k") {
				t.Errorf("the overlay does not read its backing file's data")
			}
			cloneIO(t, ours, "write -P 0x62 512k 4k")
			if !readsPattern(t, ours, 0x62, "512k", "4k") || !readsPattern(t, base, 0x61, "512k", "4k") {
				t.Errorf("a write to the overlay is not in it alone")
			}
			cloneImgCheck(t, ours)
		})
	}
	if err := createOverlay(filepath.Join(dir, "huge"), base, 5<<40); err != errOverlayLayout {
		t.Errorf("createOverlay of 5 TiB: %v; want errOverlayLayout", err)
	}
	if err := createOverlay(filepath.Join(dir, "ours-1000000"), base, 1<<20); err == nil {
		t.Errorf("createOverlay over an existing file: no error; want one")
	}
}

// TestReadChain: readChain reads what `qemu-img info --backing-chain`
// says of the chains virtcon makes (an overlay on a raw or qcow2 base, a
// relative backing name, frozen layers, internal snapshots), and leaves
// to qemu-img what it does not read.
func TestReadChain(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	dir := t.TempDir()
	img := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(m.opts.QEMUImg, args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	img("create", "-q", "-f", "raw", p("base.raw"), "3M")
	img("create", "-q", "-f", "qcow2", "-b", p("base.raw"), "-F", "raw", p("on-raw.qcow2"))
	img("create", "-q", "-f", "qcow2", p("base.qcow2"), "8M")
	img("snapshot", "-c", "s1", p("base.qcow2"))
	img("snapshot", "-c", "s2", p("base.qcow2"))
	img("create", "-q", "-f", "qcow2", "-b", "base.qcow2", "-F", "qcow2", p("rel.qcow2"))
	if err := createOverlay(p("top.qcow2"), p("rel.qcow2"), 8<<20); err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"base.raw", "on-raw.qcow2", "base.qcow2", "rel.qcow2", "top.qcow2"} {
		out, err := exec.Command(m.opts.QEMUImg, "info", "-U", "--backing-chain", "--output=json", p(top)).Output()
		if err != nil {
			t.Fatal(err)
		}
		var want []chainImage
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			for j := range want[i].Snapshots {
				want[i].Snapshots[j].Name = "" // readChain counts them
			}
		}
		got, err := readChain(p(top))
		if err != nil {
			t.Fatalf("readChain %s: %v", top, err)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("readChain %s:\n got %s\nwant %s", top, gj, wj)
		}
	}
	img("create", "-q", "-f", "qcow2", "-o", "data_file="+p("data.raw"), p("ext.qcow2"), "1M")
	if _, err := readChain(p("ext.qcow2")); err != errChainUnread {
		t.Errorf("readChain of an image with an external data file: %v; want errChainUnread", err)
	}
	if chain, err := m.backingChain(t.Context(), m.opts.QEMUImg, p("ext.qcow2")); err != nil || len(chain) != 1 {
		t.Errorf("backingChain of it (qemu-img): %v, %v; want one image", chain, err)
	}
}
