package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// sparseBlock is the granularity at which all-zero data is left as a
// hole: the usual file system block.
const sparseBlock = 4096

// copyChunk is how much of the source is read at once.
const copyChunk = 1 << 20

var zeroChunk = make([]byte, copyChunk)

// imageWriter writes an image into the store's partial file: every byte
// goes through the sha256, all-zero blocks are skipped (left as holes),
// and finish sets the file's length. The file is new and written front
// to back, so a skipped byte reads back as zero.
type imageWriter struct {
	ctx context.Context
	f   *os.File
	h   hash.Hash
	off int64
}

func newImageWriter(ctx context.Context, f *os.File) *imageWriter {
	return &imageWriter{ctx: ctx, f: f, h: sha256.New()}
}

// Write appends p.
func (w *imageWriter) Write(p []byte) (int, error) {
	w.h.Write(p)
	start := -1 // where the pending run of data in p begins
	for i := 0; i < len(p); {
		k := sparseBlock - int((w.off+int64(i))%sparseBlock)
		k = min(k, len(p)-i)
		zero := bytes.Equal(p[i:i+k], zeroChunk[:k])
		if zero && start >= 0 {
			if _, err := w.f.WriteAt(p[start:i], w.off+int64(start)); err != nil {
				return start, err
			}
			start = -1
		}
		if !zero && start < 0 {
			start = i
		}
		i += k
	}
	if start >= 0 {
		if _, err := w.f.WriteAt(p[start:], w.off+int64(start)); err != nil {
			return start, err
		}
	}
	w.off += int64(len(p))
	return len(p), nil
}

// zeros appends n zero bytes: a hole in the file, zeros in the sha256.
// Hashing them is the one cost of a hole (about 1 s per GiB here): the
// sha256 stays the one `sha256sum` prints for the stored file.
func (w *imageWriter) zeros(n int64) error {
	for n > 0 {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		k := min(n, copyChunk)
		w.h.Write(zeroChunk[:k])
		w.off += k
		n -= k
	}
	return nil
}

func (w *imageWriter) size() int64 { return w.off }

// finish gives the file its full length, trailing holes included.
func (w *imageWriter) finish() error { return w.f.Truncate(w.off) }

// openRegular opens path for an import, refusing anything but a regular
// file (after resolving symlinks) before reading a byte: a device or a
// FIFO never ends, a directory is no image. The opened file is checked
// again, so a file swapped in between is refused too.
func openRegular(path string) (*os.File, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", path, unwrapPath(err))
	}
	shown := path
	if real != path {
		shown = fmt.Sprintf("%s (%s)", path, real)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", shown, unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, real, st.Mode())
	}
	// O_NONBLOCK: a FIFO swapped in after the stat must not block the open
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", shown, unwrapPath(err))
	}
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("image import %s: %w", shown, err)
		}
		return nil, notRegular(path, real, st.Mode())
	}
	return f, nil
}

func notRegular(path, real string, mode fs.FileMode) error {
	kind, hint := "not a regular file", ""
	switch {
	case mode.IsDir():
		kind = "a directory"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind, hint = "a block device", " (make a file of it first: qemu-img convert -O qcow2 DEVICE FILE)"
	case mode&fs.ModeNamedPipe != 0:
		kind = "a FIFO"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	}
	if real != path {
		kind += " (" + real + ")"
	}
	return &ImageError{[]*FieldError{fieldErr("file", path, "is "+kind+": only a regular qcow2 or raw file can be imported"+hint)}}
}

// unwrapPath drops an *fs.PathError's operation and path: the caller
// names the path the user gave.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// copySparse copies a regular file through w, reading only its data
// extents (SEEK_DATA/SEEK_HOLE): a 2 GiB raw file with 4 KiB of data reads
// and writes 4 KiB. File systems without SEEK_DATA report the whole file
// as data, and w still leaves its zero blocks as holes.
func copySparse(ctx context.Context, w *imageWriter, src *os.File) error {
	st, err := src.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	fd := int(src.Fd())
	buf := make([]byte, copyChunk)
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, syscall.ENXIO):
			data = size // only a hole is left
		case err != nil:
			data = off // no SEEK_DATA here: read everything
		}
		data = min(data, size)
		hole := size
		if data < size {
			if h, err := unix.Seek(fd, data, unix.SEEK_HOLE); err == nil && h > data {
				hole = min(h, size)
			}
		}
		if err := w.zeros(data - off); err != nil {
			return err
		}
		for p := data; p < hole; {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := min(hole-p, copyChunk)
			n, err := src.ReadAt(buf[:k], p)
			if n < int(k) {
				if err == nil || errors.Is(err, io.EOF) {
					err = fmt.Errorf("file shrank while being read (at byte %d of %d)", p+int64(n), size)
				}
				return err
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			p += k
		}
		off = hole
	}
	return nil
}

// qcow2Backing returns the backing file name recorded in a qcow2 header,
// "" when there is none.
func qcow2Backing(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var hdr [20]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return "", fmt.Errorf("qcow2 header: %w", err)
	}
	if string(hdr[:4]) != "QFI\xfb" {
		return "", errors.New("not a qcow2 file")
	}
	off := binary.BigEndian.Uint64(hdr[8:16])
	n := binary.BigEndian.Uint32(hdr[16:20])
	if off == 0 || n == 0 {
		return "", nil
	}
	if n > 1023 { // qcow2's own limit
		return "", fmt.Errorf("qcow2 header: backing file name of %d bytes", n)
	}
	name := make([]byte, n)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", fmt.Errorf("qcow2 header: backing file name: %w", err)
	}
	return string(name), nil
}
