package iso9660

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

const (
	sectorSize = 2048

	// MaxVolumeIDLen is the longest accepted volume identifier (the size of
	// the primary volume descriptor's field). The Joliet descriptor only
	// holds 16 UCS-2 characters, so longer identifiers are truncated there.
	MaxVolumeIDLen = 32
	// MaxNameLen is the longest accepted file name, in UTF-16 code units
	// (the Joliet limit of 64 UCS-2 characters).
	MaxNameLen = 64

	jolietVolumeIDLen = 16

	firstVDSector = 16 // system area is sectors 0-15
	maxRecordLen  = 254
	ceEntryLen    = 28
)

// File is one file in the image root.
type File struct {
	Name string
	Data []byte
}

// WriteOptions tunes WriteWithOptions.
type WriteOptions struct {
	// ModTime is used for every timestamp in the image (volume creation and
	// modification dates, directory records). The zero value means the Unix
	// epoch, so images are reproducible. It is recorded in UTC and must lie
	// within the years 1900-2155.
	ModTime time.Time
}

// Write writes an ISO 9660 image with the given volume identifier and files
// to w, using the default (reproducible) options.
//
// The volume identifier must be 1 to 32 characters from [A-Za-z0-9_]; it is
// recorded as given (not upper-cased), as genisoimage and cloud-localds do,
// so "cidata" shows up as LABEL="cidata". It is also recorded in the Joliet
// descriptor (truncated to 16 characters there).
func Write(w io.Writer, volumeID string, files []File) error {
	return WriteWithOptions(w, volumeID, files, WriteOptions{})
}

// WriteWithOptions is Write with explicit options.
func WriteWithOptions(w io.Writer, volumeID string, files []File, opts WriteOptions) error {
	if w == nil {
		return errors.New("iso9660: nil writer")
	}
	img, err := plan(volumeID, files, opts)
	if err != nil {
		return err
	}
	return img.writeTo(w)
}

// entry is one file as laid out in the image.
type entry struct {
	name    string // as given (Rock Ridge NM, Joliet)
	isoName string // primary level 1 identifier, e.g. "META_DAT.;1"
	joliet  []byte // UCS-2BE identifier
	data    []byte
	extent  uint32
}

type image struct {
	volumeID string
	modTime  time.Time
	entries  []*entry // in caller order; file data is laid out in this order

	primary, joliet []*record // root directory contents, sorted
	primaryRoot     uint32
	primarySectors  uint32
	ceStart         uint32
	jolietRoot      uint32
	jolietSectors   uint32
	totalSectors    uint32
}

// Fixed sectors of the layout.
const (
	pvdSector     = firstVDSector
	svdSector     = firstVDSector + 1
	termSector    = firstVDSector + 2
	lPathSector   = firstVDSector + 3
	mPathSector   = firstVDSector + 4
	jlPathSector  = firstVDSector + 5
	jmPathSector  = firstVDSector + 6
	firstFreeSect = firstVDSector + 7
	pathTableLen  = 10 // a single entry for the root directory
)

func plan(volumeID string, files []File, opts WriteOptions) (*image, error) {
	if err := validateVolumeID(volumeID); err != nil {
		return nil, err
	}
	mt := opts.ModTime
	if mt.IsZero() {
		mt = time.Unix(0, 0)
	}
	mt = mt.UTC()
	if y := mt.Year(); y < 1900 || y > 2155 {
		return nil, fmt.Errorf("iso9660: modification time %s is outside the representable years 1900-2155", mt.Format(time.RFC3339))
	}

	img := &image{volumeID: volumeID, modTime: mt}
	seen := make(map[string]bool, len(files))
	used := make(map[string]bool, len(files))
	for i, f := range files {
		units, err := validateName(f.Name)
		if err != nil {
			return nil, fmt.Errorf("iso9660: file %d: %w", i, err)
		}
		if seen[f.Name] {
			return nil, fmt.Errorf("iso9660: duplicate file name %q", f.Name)
		}
		seen[f.Name] = true
		if uint64(len(f.Data)) > math.MaxUint32 {
			return nil, fmt.Errorf("iso9660: file %q is too large (%d bytes, limit %d)", f.Name, len(f.Data), uint32(math.MaxUint32))
		}
		j := make([]byte, 2*len(units))
		for k, u := range units {
			binary.BigEndian.PutUint16(j[2*k:], u)
		}
		img.entries = append(img.entries, &entry{
			name:    f.Name,
			isoName: level1Name(f.Name, used),
			joliet:  j,
			data:    f.Data,
		})
	}
	if err := img.layout(); err != nil {
		return nil, err
	}
	return img, nil
}

func validateVolumeID(id string) error {
	if id == "" {
		return errors.New("iso9660: empty volume identifier")
	}
	if len(id) > MaxVolumeIDLen {
		return fmt.Errorf("iso9660: volume identifier %q is %d characters long, limit %d", id, len(id), MaxVolumeIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("iso9660: volume identifier %q contains %q; only A-Z, a-z, 0-9 and _ are allowed", id, rune(c))
		}
	}
	return nil
}

// validateName checks a file name and returns its UTF-16 (UCS-2) encoding.
func validateName(name string) ([]uint16, error) {
	switch {
	case name == "":
		return nil, errors.New("empty file name")
	case name == "." || name == "..":
		return nil, fmt.Errorf("invalid file name %q", name)
	case !utf8.ValidString(name):
		return nil, fmt.Errorf("file name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		switch {
		case r == 0:
			return nil, fmt.Errorf("file name %q contains a NUL byte", name)
		case r == '/':
			return nil, fmt.Errorf("file name %q contains '/' (subdirectories are not supported)", name)
		case r < 0x20 || r == 0x7f:
			return nil, fmt.Errorf("file name %q contains control character %U", name, r)
		case strings.ContainsRune(`*:;?\`, r):
			return nil, fmt.Errorf("file name %q contains %q, which Joliet does not allow", name, r)
		case r > 0xffff:
			return nil, fmt.Errorf("file name %q contains %U, which UCS-2 (Joliet) cannot represent", name, r)
		}
	}
	units := utf16.Encode([]rune(name))
	if len(units) > MaxNameLen {
		return nil, fmt.Errorf("file name %q is %d characters long, Joliet limit %d", name, len(units), MaxNameLen)
	}
	return units, nil
}

// level1Name derives a unique ISO 9660 level 1 identifier ("NAME8.EXT;1")
// from name, recording it in used.
func level1Name(name string, used map[string]bool) string {
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		base, ext = name[:i], name[i+1:]
	}
	base, ext = dChars(base, 8), dChars(ext, 3)
	if base == "" {
		base = "_"
	}
	try := base
	for n := 1; ; n++ {
		key := try + "." + ext
		if !used[key] {
			used[key] = true
			return key + ";1"
		}
		suffix := strconv.Itoa(n)
		try = base[:min(len(base), 8-len(suffix))] + suffix
	}
}

// dChars maps s onto d-characters (A-Z, 0-9, _) and truncates it to n.
func dChars(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() == n {
			break
		}
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// record is one directory record; extents are resolved when encoding.
type record struct {
	ident []byte
	dir   bool
	e     *entry // nil for "." and ".."
	su    []byte // System Use entries stored in the record itself
	cont  []byte // System Use entries stored in a continuation area
	// Continuation area location, assigned by layout.
	ceBlock, ceOffset uint32
}

func (r *record) baseLen() int {
	n := 33 + len(r.ident)
	if n%2 == 1 {
		n++ // padding field after an even-length identifier
	}
	return n
}

func (r *record) len() int {
	n := r.baseLen() + len(r.su)
	if r.cont != nil {
		n += ceEntryLen
	}
	if n%2 == 1 {
		n++
	}
	return n
}

// setSystemUse distributes SUSP entries between the record and, if they do
// not fit, a continuation area. The first entry always stays in the record.
func (r *record) setSystemUse(entries [][]byte) {
	total := 0
	for _, e := range entries {
		total += len(e)
	}
	if r.baseLen()+total <= maxRecordLen {
		r.su = slices.Concat(entries...)
		return
	}
	room := maxRecordLen - r.baseLen() - ceEntryLen
	i := 0
	for ; i < len(entries); i++ {
		if i > 0 && len(r.su)+len(entries[i]) > room {
			break
		}
		r.su = append(r.su, entries[i]...)
	}
	r.cont = slices.Concat(entries[i:]...)
}

// SUSP / RRIP entries.

func suspEntry(sig string, payload ...[]byte) []byte {
	n := 4
	for _, p := range payload {
		n += len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, sig[0], sig[1], byte(n), 1)
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

const (
	rripID         = "RRIP_1991A"
	rripDescriptor = "THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS"
	rripSource     = "PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  SEE PUBLISHER IDENTIFIER IN PRIMARY VOLUME DESCRIPTOR FOR CONTACT INFORMATION."

	rrFlagPX = 0x01
	rrFlagNM = 0x08

	modeDir  = 0o040555
	modeFile = 0o100444
)

func spEntry() []byte { return suspEntry("SP", []byte{0xbe, 0xef, 0}) }

func erEntry() []byte {
	return suspEntry("ER",
		[]byte{byte(len(rripID)), byte(len(rripDescriptor)), byte(len(rripSource)), 1},
		[]byte(rripID), []byte(rripDescriptor), []byte(rripSource))
}

func rrEntry(flags byte) []byte { return suspEntry("RR", []byte{flags}) }

func pxEntry(mode, links uint32) []byte {
	return suspEntry("PX", both32(mode), both32(links), both32(0), both32(0))
}

func nmEntry(name string) []byte { return suspEntry("NM", []byte{0}, []byte(name)) }

func ceEntry(block, offset, length uint32) []byte {
	return suspEntry("CE", both32(block), both32(offset), both32(length))
}

func both16(v uint16) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
	return b
}

func both32(v uint32) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
	return b
}

// layout builds the directory records and assigns every sector.
func (img *image) layout() error {
	// Primary directory, with Rock Ridge.
	dot := &record{ident: []byte{0}, dir: true}
	dot.setSystemUse([][]byte{spEntry(), rrEntry(rrFlagPX), pxEntry(modeDir, 2), erEntry()})
	dotdot := &record{ident: []byte{1}, dir: true}
	dotdot.setSystemUse([][]byte{rrEntry(rrFlagPX), pxEntry(modeDir, 2)})
	var files []*record
	for _, e := range img.entries {
		r := &record{ident: []byte(e.isoName), e: e}
		r.setSystemUse([][]byte{rrEntry(rrFlagPX | rrFlagNM), pxEntry(modeFile, 1), nmEntry(e.name)})
		files = append(files, r)
	}
	slices.SortFunc(files, func(a, b *record) int { return compareISO(string(a.ident), string(b.ident)) })
	img.primary = append([]*record{dot, dotdot}, files...)

	// Joliet directory, no System Use.
	files = nil
	for _, e := range img.entries {
		files = append(files, &record{ident: e.joliet, e: e})
	}
	slices.SortFunc(files, func(a, b *record) int { return bytes.Compare(a.ident, b.ident) })
	img.joliet = append([]*record{{ident: []byte{0}, dir: true}, {ident: []byte{1}, dir: true}}, files...)

	next := uint64(firstFreeSect)
	img.primaryRoot = uint32(next)
	img.primarySectors = dirSectors(img.primary)
	next += uint64(img.primarySectors)

	// Continuation areas, each kept within one sector.
	img.ceStart = uint32(next)
	off, ceSectors := uint32(0), uint32(0)
	for _, r := range img.primary {
		if r.cont == nil {
			continue
		}
		if ceSectors == 0 || off+uint32(len(r.cont)) > sectorSize {
			ceSectors++
			off = 0
		}
		r.ceBlock, r.ceOffset = img.ceStart+ceSectors-1, off
		off += uint32(len(r.cont))
	}
	next += uint64(ceSectors)

	img.jolietRoot = uint32(next)
	img.jolietSectors = dirSectors(img.joliet)
	next += uint64(img.jolietSectors)

	for _, e := range img.entries {
		if len(e.data) == 0 {
			continue // empty files get extent 0, length 0
		}
		e.extent = uint32(next)
		next += (uint64(len(e.data)) + sectorSize - 1) / sectorSize
		if next > math.MaxUint32 {
			return errors.New("iso9660: image too large")
		}
	}
	img.totalSectors = uint32(next)
	return nil
}

// dirSectors counts the sectors a directory needs; records never cross a
// sector boundary.
func dirSectors(recs []*record) uint32 {
	sectors, off := uint32(1), 0
	for _, r := range recs {
		if off+r.len() > sectorSize {
			sectors++
			off = 0
		}
		off += r.len()
	}
	return sectors
}

// compareISO orders level 1 identifiers as ECMA-119 9.3 requires: by name,
// then extension, each padded with spaces (versions are all 1).
func compareISO(a, b string) int {
	split := func(s string) (string, string) {
		s, _, _ = strings.Cut(s, ";")
		name, ext, _ := strings.Cut(s, ".")
		return name, ext
	}
	an, ae := split(a)
	bn, be := split(b)
	if c := comparePadded(an, bn); c != 0 {
		return c
	}
	return comparePadded(ae, be)
}

func comparePadded(a, b string) int {
	n := max(len(a), len(b))
	a += strings.Repeat(" ", n-len(a))
	b += strings.Repeat(" ", n-len(b))
	return strings.Compare(a, b)
}

func (img *image) dirDate() []byte {
	t := img.modTime
	return []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()),
		byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

func (img *image) vdDate() []byte {
	t := img.modTime
	s := fmt.Sprintf("%04d%02d%02d%02d%02d%02d%02d", t.Year(), int(t.Month()), t.Day(),
		t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/10_000_000)
	return append([]byte(s), 0)
}

// unspecifiedDate is the "not specified" volume descriptor date.
func unspecifiedDate() []byte {
	return append(bytes.Repeat([]byte{'0'}, 16), 0)
}

// encodeRecord encodes r for a directory at root (rootSectors long).
func (img *image) encodeRecord(r *record, root, rootSectors uint32) []byte {
	var extent, size uint32
	var flags byte
	if r.dir {
		extent, size, flags = root, rootSectors*sectorSize, 0x02
	} else {
		extent, size = r.e.extent, uint32(len(r.e.data))
	}
	b := make([]byte, 0, r.len())
	b = append(b, byte(r.len()), 0)
	b = append(b, both32(extent)...)
	b = append(b, both32(size)...)
	b = append(b, img.dirDate()...)
	b = append(b, flags, 0, 0)
	b = append(b, both16(1)...)
	b = append(b, byte(len(r.ident)))
	b = append(b, r.ident...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	b = append(b, r.su...)
	if r.cont != nil {
		b = append(b, ceEntry(r.ceBlock, r.ceOffset, uint32(len(r.cont)))...)
	}
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

func (img *image) encodeDir(recs []*record, root, rootSectors uint32) []byte {
	out := make([]byte, rootSectors*sectorSize)
	off := 0
	for _, r := range recs {
		rec := img.encodeRecord(r, root, rootSectors)
		if off+len(rec) > sectorSize*(off/sectorSize+1) {
			off = (off/sectorSize + 1) * sectorSize
		}
		copy(out[off:], rec)
		off += len(rec)
	}
	return out
}

// pathTable encodes a one-entry path table (root only).
func pathTable(root uint32, bigEndian bool) []byte {
	b := make([]byte, sectorSize)
	b[0] = 1 // length of directory identifier
	b[1] = 0 // extended attribute record length
	var order binary.ByteOrder = binary.LittleEndian
	if bigEndian {
		order = binary.BigEndian
	}
	order.PutUint32(b[2:], root)
	order.PutUint16(b[6:], 1) // parent directory number
	b[8] = 0                  // root identifier, then one padding byte
	return b
}

func fill(b []byte, c byte) {
	for i := range b {
		b[i] = c
	}
}

// fillUCS2 fills b with s in UCS-2BE, padded with UCS-2 spaces (and a final
// zero byte when len(b) is odd).
func fillUCS2(b []byte, s string) {
	for i := 0; i+1 < len(b); i += 2 {
		b[i], b[i+1] = 0, ' '
	}
	if len(b)%2 == 1 {
		b[len(b)-1] = 0
	}
	for i, u := range utf16.Encode([]rune(s)) {
		if 2*i+1 >= len(b) {
			break
		}
		binary.BigEndian.PutUint16(b[2*i:], u)
	}
}

// volumeDescriptor encodes the primary (joliet=false) or Joliet
// supplementary volume descriptor.
func (img *image) volumeDescriptor(joliet bool) []byte {
	b := make([]byte, sectorSize)
	text := func(off, n int, s string) {
		if joliet {
			fillUCS2(b[off:off+n], s)
			return
		}
		fill(b[off:off+n], ' ')
		copy(b[off:off+n], s)
	}
	b[0] = 1
	root, rootSectors := img.primaryRoot, img.primarySectors
	lPath, mPath := uint32(lPathSector), uint32(mPathSector)
	volID := img.volumeID
	if joliet {
		b[0] = 2
		root, rootSectors = img.jolietRoot, img.jolietSectors
		lPath, mPath = jlPathSector, jmPathSector
		if len(volID) > jolietVolumeIDLen {
			volID = volID[:jolietVolumeIDLen]
		}
		copy(b[88:], "%/E") // UCS-2 level 3
	}
	copy(b[1:], "CD001")
	b[6] = 1
	text(8, 32, "")     // system identifier
	text(40, 32, volID) // volume identifier
	copy(b[80:], both32(img.totalSectors))
	copy(b[120:], both16(1)) // volume set size
	copy(b[124:], both16(1)) // volume sequence number
	copy(b[128:], both16(sectorSize))
	copy(b[132:], both32(pathTableLen))
	binary.LittleEndian.PutUint32(b[140:], lPath)
	binary.BigEndian.PutUint32(b[148:], mPath)
	copy(b[156:190], img.encodeRecord(&record{ident: []byte{0}, dir: true}, root, rootSectors))
	text(190, 128, "") // volume set identifier
	text(318, 128, "") // publisher
	text(446, 128, "") // data preparer
	text(574, 128, "") // application
	text(702, 37, "")  // copyright file
	text(739, 37, "")  // abstract file
	text(776, 37, "")  // bibliographic file
	copy(b[813:], img.vdDate())
	copy(b[830:], img.vdDate())
	copy(b[847:], unspecifiedDate())
	copy(b[864:], unspecifiedDate())
	b[881] = 1 // file structure version
	return b
}

func (img *image) writeTo(w io.Writer) error {
	meta := make([]byte, 0, int(img.jolietRoot+img.jolietSectors)*sectorSize)
	meta = append(meta, make([]byte, firstVDSector*sectorSize)...)
	meta = append(meta, img.volumeDescriptor(false)...)
	meta = append(meta, img.volumeDescriptor(true)...)
	term := make([]byte, sectorSize)
	term[0] = 255
	copy(term[1:], "CD001")
	term[6] = 1
	meta = append(meta, term...)
	meta = append(meta, pathTable(img.primaryRoot, false)...)
	meta = append(meta, pathTable(img.primaryRoot, true)...)
	meta = append(meta, pathTable(img.jolietRoot, false)...)
	meta = append(meta, pathTable(img.jolietRoot, true)...)
	meta = append(meta, img.encodeDir(img.primary, img.primaryRoot, img.primarySectors)...)
	if n := int(img.jolietRoot - img.ceStart); n > 0 {
		ce := make([]byte, n*sectorSize)
		for _, r := range img.primary {
			if r.cont != nil {
				copy(ce[int(r.ceBlock-img.ceStart)*sectorSize+int(r.ceOffset):], r.cont)
			}
		}
		meta = append(meta, ce...)
	}
	meta = append(meta, img.encodeDir(img.joliet, img.jolietRoot, img.jolietSectors)...)
	if _, err := w.Write(meta); err != nil {
		return fmt.Errorf("iso9660: %w", err)
	}

	var zeros [sectorSize]byte
	for _, e := range img.entries {
		if len(e.data) == 0 {
			continue
		}
		if _, err := w.Write(e.data); err != nil {
			return fmt.Errorf("iso9660: %w", err)
		}
		if pad := (sectorSize - len(e.data)%sectorSize) % sectorSize; pad > 0 {
			if _, err := w.Write(zeros[:pad]); err != nil {
				return fmt.Errorf("iso9660: %w", err)
			}
		}
	}
	return nil
}
