package vm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// createOverlay writes an empty qcow2 image at path (which must not
// exist) backed by the qcow2 image backing, of size bytes: what
// `qemu-img create -f qcow2 -u -b BACKING -F qcow2 PATH SIZE` makes
// (version 3, 64 KiB clusters, 16-bit refcounts, zlib), less its
// feature-name table, without starting a process and with one fsync
// instead of five. A linked clone makes two such overlays, and this is
// most of its time (issue 21: 4.5x a `qemu-img create -b`). Images it
// cannot lay out in four clusters (over 4 TiB, a backing name over
// 1023 bytes) return errOverlayLayout: the caller runs qemu-img.
//
// The layout (cluster: what): 0: header, backing-format extension, end
// of extensions, backing file name; 1: refcount table (one entry, the
// block in cluster 2); 2: refcount block (clusters 0-3 used once); 3:
// L1 table, all zero (nothing allocated: every read goes to backing).
func createOverlay(path, backing string, size int64) error {
	const clusterBits = 16
	const cluster = 1 << clusterBits
	size = (size + 511) &^ 511
	perL2 := int64(cluster/8) * cluster // bytes one L2 table maps
	l1 := (size + perL2 - 1) / perL2
	if size <= 0 || l1*8 > cluster || len(backing) == 0 || len(backing) > 1023 {
		return errOverlayLayout
	}
	const backingFmt = "qcow2"
	const extOff = 112 // header_length: v3 with the compression type
	extEnd := extOff + 8 + (len(backingFmt)+7)&^7
	nameOff := extEnd + 8 // after the end-of-extensions entry

	h := make([]byte, nameOff+len(backing))
	be := binary.BigEndian
	be.PutUint32(h[0:], 0x514649fb) // QFI\xfb
	be.PutUint32(h[4:], 3)
	be.PutUint64(h[8:], uint64(nameOff))
	be.PutUint32(h[16:], uint32(len(backing)))
	be.PutUint32(h[20:], clusterBits)
	be.PutUint64(h[24:], uint64(size))
	// 32: no encryption
	be.PutUint32(h[36:], uint32(l1))
	be.PutUint64(h[40:], 3*cluster) // L1 table
	be.PutUint64(h[48:], 1*cluster) // refcount table
	be.PutUint32(h[56:], 1)         // refcount table clusters
	// 60: no snapshots; 72-95: no incompatible, compatible or autoclear features
	be.PutUint32(h[96:], 4) // refcount order: 16 bits
	be.PutUint32(h[100:], extOff)
	// 104: compression type zlib, then padding
	be.PutUint32(h[extOff:], 0xe2792aca) // backing file format name
	be.PutUint32(h[extOff+4:], uint32(len(backingFmt)))
	copy(h[extOff+8:], backingFmt)
	// extEnd: the end of extensions, all zero
	copy(h[nameOff:], backing)

	refTable := make([]byte, 8)
	be.PutUint64(refTable, 2*cluster)
	refBlock := make([]byte, 8)
	for i := 0; i < 4; i++ {
		be.PutUint16(refBlock[2*i:], 1)
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = func() error {
		for _, w := range []struct {
			b   []byte
			off int64
		}{{h, 0}, {refTable, cluster}, {refBlock, 2 * cluster}} {
			if _, err := f.WriteAt(w.b, w.off); err != nil {
				return err
			}
		}
		// the L1 table reads as zeros: the file ends after it
		if err := f.Truncate(3*cluster + l1*8); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("create overlay %s: %w", path, err)
	}
	return nil
}

// makeOverlay is createOverlay, or `qemu-img create -u` for what it
// cannot lay out.
func makeOverlay(ctx context.Context, img, backing, path string, size int64) error {
	err := createOverlay(path, backing, size)
	if !errors.Is(err, errOverlayLayout) {
		return err
	}
	return runTool(ctx, img, "create", "-q", "-f", "qcow2", "-u", "-b", backing, "-F", "qcow2", path, strconv.FormatInt(size, 10))
}

// errOverlayLayout: createOverlay cannot lay the image out; qemu-img can.
var errOverlayLayout = errors.New("overlay beyond createOverlay's layout")

// errChainUnread: readChain met an image it does not read (another
// format than qcow2 and raw, encryption, an external data file, an
// unknown incompatible feature, a loop); qemu-img reads it.
var errChainUnread = errors.New("backing chain beyond readChain")

// readChain is `qemu-img info -U --backing-chain` of path for what a
// clone needs (file names, formats, sizes, backing names, the number of
// snapshots), read from the images' headers without starting a process.
// Names are what qemu-img gives: path as given, then each backing file
// as its overlay names it, made absolute against the overlay's directory.
func readChain(path string) ([]chainImage, error) {
	var chain []chainImage
	name, format := path, ""
	seen := map[string]bool{}
	for name != "" {
		if seen[name] || len(chain) > 64 {
			return nil, errChainUnread
		}
		seen[name] = true
		img, err := readImageHeader(name, format)
		if err != nil {
			return nil, err
		}
		chain = append(chain, img)
		name, format = img.FullBackingFilename, img.BackingFilenameFmt
	}
	return chain, nil
}

// readImageHeader reads one image of a chain; format is what its overlay
// says it is ("": probed, as qemu-img does).
func readImageHeader(path, format string) (chainImage, error) {
	img := chainImage{Filename: path}
	f, err := os.Open(path)
	if err != nil {
		return img, err
	}
	defer f.Close()
	h := make([]byte, 64<<10)
	n, err := f.ReadAt(h, 0)
	if err != nil && n == 0 {
		fi, serr := f.Stat()
		if serr != nil || fi.Size() != 0 {
			return img, fmt.Errorf("read %s: %w", path, err)
		}
	}
	h = h[:n]
	be := binary.BigEndian
	isQcow2 := len(h) >= 72 && be.Uint32(h) == 0x514649fb
	switch {
	case format == "" && isQcow2, format == "qcow2":
		if !isQcow2 {
			return img, errChainUnread
		}
	case format == "" || format == "raw":
		fi, err := f.Stat()
		if err != nil {
			return img, err
		}
		img.Format, img.VirtualSize = "raw", fi.Size()
		return img, nil
	default:
		return img, errChainUnread
	}
	img.Format = "qcow2"
	version := be.Uint32(h[4:])
	if version != 2 && version != 3 || be.Uint32(h[32:]) != 0 { // encrypted
		return img, errChainUnread
	}
	img.VirtualSize = int64(be.Uint64(h[24:]))
	if n := be.Uint32(h[60:]); n > 0 {
		img.Snapshots = make([]struct {
			Name string `json:"name"`
		}, n)
	}
	extOff := 72
	if version == 3 {
		if len(h) < 104 || be.Uint64(h[72:]) != 0 { // incompatible features (dirty, corrupt, data file, ...)
			return img, errChainUnread
		}
		extOff = int(be.Uint32(h[100:]))
	}
	for extOff+8 <= len(h) {
		typ, l := be.Uint32(h[extOff:]), int(be.Uint32(h[extOff+4:]))
		if typ == 0 {
			break
		}
		if extOff+8+l > len(h) {
			return img, errChainUnread
		}
		data := h[extOff+8 : extOff+8+l]
		switch typ {
		case 0xe2792aca:
			img.BackingFilenameFmt = string(data)
		case 0x44415441: // external data file
			return img, errChainUnread
		}
		extOff += 8 + (l+7)&^7
	}
	if off, l := be.Uint64(h[8:]), be.Uint32(h[16:]); off != 0 && l != 0 {
		if off+uint64(l) > uint64(len(h)) {
			return img, errChainUnread
		}
		b := string(h[off : off+uint64(l)])
		if !filepath.IsAbs(b) {
			if strings.Contains(b, ":") { // a protocol (nbd:, json:...)
				return img, errChainUnread
			}
			b = filepath.Join(filepath.Dir(path), b)
		}
		img.FullBackingFilename = b
	}
	return img, nil
}
