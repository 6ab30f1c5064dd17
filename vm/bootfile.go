package vm

import (
	"bytes"
	"io"
	"os"
)

// bootFileKind says which kind of direct-kernel-boot file path is, by its
// magic: "kernel" (an x86 bzImage, an ELF vmlinux), "initrd" (a cpio
// archive, raw or compressed as the kernel reads it), or "" for neither
// (or unreadable).
func bootFileKind(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 0x210)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case len(head) >= 0x206 && string(head[0x202:0x206]) == "HdrS": // the x86 boot protocol's header
		return "kernel"
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "kernel"
	}
	for _, magic := range [][]byte{
		[]byte("070701"), []byte("070702"), // cpio newc/crc
		{0x1f, 0x8b},                     // gzip
		{0x28, 0xb5, 0x2f, 0xfd},         // zstd
		{0xfd, '7', 'z', 'X', 'Z', 0x00}, // xz
		{0x02, 0x21, 0x4c, 0x18},         // lz4 legacy
		[]byte("BZh"),                    // bzip2
		{0x89, 'L', 'Z', 'O'},            // lzop
	} {
		if bytes.HasPrefix(head, magic) {
			return "initrd"
		}
	}
	return ""
}
