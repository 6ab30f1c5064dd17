package iso9660

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

func seedFiles() []File {
	return []File{
		{Name: "meta-data", Data: []byte("instance-id: iid-local01\nlocal-hostname: guest\n")},
		{Name: "user-data", Data: []byte("#cloud-config\npassword: s3cret\nchpasswd: { expire: False }\n")},
		{Name: "network-config", Data: []byte("version: 2\nethernets: {}\n")},
	}
}

func mustWrite(t *testing.T, volumeID string, files []File) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, volumeID, files); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.Bytes()
}

func TestValidation(t *testing.T) {
	ok := []File{{Name: "meta-data"}}
	tests := []struct {
		name     string
		volumeID string
		files    []File
		want     string // substring of the error
	}{
		{"empty volume id", "", ok, "empty volume identifier"},
		{"long volume id", strings.Repeat("a", 33), ok, `"` + strings.Repeat("a", 33) + `" is 33 characters long`},
		{"bad volume id char", "ci-data", ok, `volume identifier "ci-data" contains '-'`},
		{"empty name", "cidata", []File{{Name: ""}}, "file 0: empty file name"},
		{"dot", "cidata", []File{{Name: "."}}, `invalid file name "."`},
		{"dotdot", "cidata", []File{{Name: ".."}}, `invalid file name ".."`},
		{"slash", "cidata", []File{{Name: "a/b"}}, `file name "a/b" contains '/'`},
		{"nul", "cidata", []File{{Name: "a\x00b"}}, `file name "a\x00b" contains a NUL byte`},
		{"control", "cidata", []File{{Name: "a\nb"}}, `contains control character U+000A`},
		{"joliet char", "cidata", []File{{Name: "a:b"}}, `file name "a:b" contains ':'`},
		{"semicolon", "cidata", []File{{Name: "a;1"}}, `contains ';'`},
		{"non-bmp", "cidata", []File{{Name: "a\U0001F600"}}, "UCS-2 (Joliet) cannot represent"},
		{"invalid utf8", "cidata", []File{{Name: "a\xffb"}}, "not valid UTF-8"},
		{"too long", "cidata", []File{{Name: strings.Repeat("x", 65)}}, "is 65 characters long, Joliet limit 64"},
		{"duplicate", "cidata", []File{{Name: "meta-data"}, {Name: "user-data"}, {Name: "meta-data"}}, `duplicate file name "meta-data"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := Write(&b, tc.volumeID, tc.files)
			if err == nil {
				t.Fatalf("Write succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if b.Len() != 0 {
				t.Errorf("wrote %d bytes despite the error", b.Len())
			}
		})
	}

	// Limits themselves are fine.
	if err := Write(&bytes.Buffer{}, strings.Repeat("A", 32), []File{{Name: strings.Repeat("é", 64)}}); err != nil {
		t.Errorf("limits: %v", err)
	}
	if err := Write(&bytes.Buffer{}, "cidata", nil); err != nil {
		t.Errorf("no files: %v", err)
	}
	if err := WriteWithOptions(&bytes.Buffer{}, "cidata", nil, WriteOptions{ModTime: time.Date(1850, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil || !strings.Contains(err.Error(), "1850") {
		t.Errorf("ModTime 1850: got %v", err)
	}
	if err := Write(nil, "cidata", nil); err == nil {
		t.Error("nil writer accepted")
	}
}

// --- a tiny ISO 9660 reader, independent of the writer ---

type dirRec struct {
	ident  []byte
	extent uint32
	size   uint32
	flags  byte
	date   []byte
	su     []byte
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// both32At checks and returns a both-endian 32-bit value.
func both32At(t *testing.T, b []byte, what string) uint32 {
	t.Helper()
	l, m := binary.LittleEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	if l != m {
		t.Fatalf("%s: little-endian %d != big-endian %d", what, l, m)
	}
	return l
}

func parseRec(t *testing.T, b []byte) dirRec {
	t.Helper()
	n := int(b[0])
	if n < 34 || n > len(b) {
		t.Fatalf("bad record length %d", n)
	}
	if n%2 != 0 {
		t.Errorf("record length %d is odd", n)
	}
	fi := int(b[32])
	suStart := 33 + fi
	if fi%2 == 0 {
		suStart++
	}
	r := dirRec{
		ident:  b[33 : 33+fi],
		extent: both32At(t, b[2:], "extent"),
		size:   both32At(t, b[10:], "data length"),
		flags:  b[25],
		date:   b[18:25],
	}
	if suStart < n {
		r.su = b[suStart:n]
	}
	return r
}

func sectorOf(img []byte, n uint32) []byte { return img[int(n)*sectorSize : int(n+1)*sectorSize] }

func readDir(t *testing.T, img []byte, extent, size uint32) []dirRec {
	t.Helper()
	if size%sectorSize != 0 {
		t.Fatalf("directory size %d not a multiple of the sector size", size)
	}
	var recs []dirRec
	for s := uint32(0); s < size/sectorSize; s++ {
		sec := sectorOf(img, extent+s)
		for off := 0; off < sectorSize && sec[off] != 0; off += int(sec[off]) {
			if off+int(sec[off]) > sectorSize {
				t.Fatalf("record at sector %d offset %d crosses the sector boundary", extent+s, off)
			}
			recs = append(recs, parseRec(t, sec[off:]))
		}
	}
	return recs
}

type volume struct {
	vd   []byte
	root dirRec
}

func readVolumes(t *testing.T, img []byte) (pvd, svd volume) {
	t.Helper()
	if len(img)%sectorSize != 0 || len(img) < 19*sectorSize {
		t.Fatalf("image length %d", len(img))
	}
	if !bytes.Equal(img[:16*sectorSize], make([]byte, 16*sectorSize)) {
		t.Error("system area is not zero")
	}
	seenTerm := false
	for s := uint32(16); !seenTerm; s++ {
		vd := sectorOf(img, s)
		if string(vd[1:6]) != "CD001" || vd[6] != 1 {
			t.Fatalf("sector %d: bad volume descriptor header %q", s, vd[:7])
		}
		switch vd[0] {
		case 1:
			if s != 16 {
				t.Errorf("PVD at sector %d, want 16", s)
			}
			pvd = volume{vd: vd, root: parseRec(t, vd[156:190])}
		case 2:
			if string(vd[88:91]) == "%/E" {
				svd = volume{vd: vd, root: parseRec(t, vd[156:190])}
			}
		case 255:
			seenTerm = true
		default:
			t.Fatalf("sector %d: unexpected descriptor type %d", s, vd[0])
		}
	}
	if pvd.vd == nil || svd.vd == nil {
		t.Fatal("missing PVD or Joliet SVD")
	}
	return pvd, svd
}

// checkVolume checks the volume descriptor fields shared by PVD and SVD.
func checkVolume(t *testing.T, img []byte, v volume, name string) {
	t.Helper()
	if got := both32At(t, v.vd[80:], name+" volume space size"); int(got) != len(img)/sectorSize {
		t.Errorf("%s: volume space size %d, image has %d sectors", name, got, len(img)/sectorSize)
	}
	if bs := binary.LittleEndian.Uint16(v.vd[128:]); bs != sectorSize || binary.BigEndian.Uint16(v.vd[130:]) != sectorSize {
		t.Errorf("%s: logical block size %d", name, bs)
	}
	if v.root.flags&2 == 0 || !bytes.Equal(v.root.ident, []byte{0}) {
		t.Errorf("%s: bad root record %+v", name, v.root)
	}
	ptSize := both32At(t, v.vd[132:], name+" path table size")
	lpt := sectorOf(img, le32(v.vd[140:]))[:ptSize]
	mpt := sectorOf(img, binary.BigEndian.Uint32(v.vd[148:]))[:ptSize]
	if ptSize != 10 {
		t.Fatalf("%s: path table size %d, want 10 (root only)", name, ptSize)
	}
	if lpt[0] != 1 || lpt[8] != 0 || le32(lpt[2:]) != v.root.extent || binary.LittleEndian.Uint16(lpt[6:]) != 1 {
		t.Errorf("%s: bad L path table % x (root at %d)", name, lpt, v.root.extent)
	}
	if mpt[0] != 1 || mpt[8] != 0 || binary.BigEndian.Uint32(mpt[2:]) != v.root.extent || binary.BigEndian.Uint16(mpt[6:]) != 1 {
		t.Errorf("%s: bad M path table % x (root at %d)", name, mpt, v.root.extent)
	}
	recs := readDir(t, img, v.root.extent, v.root.size)
	if len(recs) < 2 || !bytes.Equal(recs[0].ident, []byte{0}) || !bytes.Equal(recs[1].ident, []byte{1}) {
		t.Fatalf("%s: root does not start with . and ..", name)
	}
	for _, r := range recs[:2] {
		if r.extent != v.root.extent || r.size != v.root.size || r.flags&2 == 0 {
			t.Errorf("%s: . or .. record %+v does not describe the root", name, r)
		}
	}
	for _, r := range recs[2:] {
		if int(r.extent)*sectorSize+int(r.size) > len(img) {
			t.Errorf("%s: file %q extends beyond the image", name, r.ident)
		}
	}
}

func ucs2(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// jolietFiles reads the Joliet root directory back.
func jolietFiles(t *testing.T, img []byte) map[string][]byte {
	t.Helper()
	_, svd := readVolumes(t, img)
	out := map[string][]byte{}
	var prev []byte
	for _, r := range readDir(t, img, svd.root.extent, svd.root.size)[2:] {
		if prev != nil && bytes.Compare(prev, r.ident) >= 0 {
			t.Errorf("Joliet records not sorted: %q before %q", ucs2(prev), ucs2(r.ident))
		}
		prev = r.ident
		out[ucs2(r.ident)] = img[int(r.extent)*sectorSize : int(r.extent)*sectorSize+int(r.size)]
	}
	return out
}

// suspEntries returns the SUSP entries of r, following CE continuations.
func suspEntries(t *testing.T, img []byte, su []byte) [][]byte {
	t.Helper()
	var out [][]byte
	var next []byte // continuation area, read once this area is done
	for {
		if len(su) < 4 {
			if next == nil {
				break
			}
			su, next = next, nil
			continue
		}
		n := int(su[2])
		if n < 4 || n > len(su) {
			t.Fatalf("bad SUSP entry length %d in % x", n, su)
		}
		e := su[:n]
		su = su[n:]
		if string(e[:2]) == "CE" {
			block := both32At(t, e[4:], "CE block")
			off := both32At(t, e[12:], "CE offset")
			length := both32At(t, e[20:], "CE length")
			if off+length > sectorSize {
				t.Fatalf("continuation area crosses a sector: offset %d length %d", off, length)
			}
			next = sectorOf(img, block)[off : off+length]
			continue
		}
		out = append(out, e)
	}
	return out
}

type rrFile struct {
	isoName string
	data    []byte
	mode    uint32
}

// rockRidgeFiles reads the primary root directory with Rock Ridge names.
func rockRidgeFiles(t *testing.T, img []byte) map[string]rrFile {
	t.Helper()
	pvd, _ := readVolumes(t, img)
	recs := readDir(t, img, pvd.root.extent, pvd.root.size)
	dot := suspEntries(t, img, recs[0].su)
	if len(dot) == 0 || !bytes.Equal(dot[0], []byte{'S', 'P', 7, 1, 0xbe, 0xef, 0}) {
		t.Fatalf("root '.' does not start with an SP entry: %q", dot)
	}
	var er []byte
	for _, e := range dot {
		if string(e[:2]) == "ER" {
			er = e
		}
	}
	if er == nil || string(er[8:8+int(er[4])]) != "RRIP_1991A" || int(er[2]) != 8+int(er[4])+int(er[5])+int(er[6]) {
		t.Fatalf("no valid RRIP ER entry in root '.': %q", dot)
	}
	out := map[string]rrFile{}
	prev := ""
	validISO := regexp.MustCompile(`^[A-Z0-9_]{1,8}\.[A-Z0-9_]{0,3};1$`)
	for _, r := range recs[2:] {
		id := string(r.ident)
		if !validISO.MatchString(id) {
			t.Errorf("primary identifier %q is not a level 1 d-character name", id)
		}
		if prev != "" && compareISO(prev, id) >= 0 {
			t.Errorf("primary records not sorted: %q before %q", prev, id)
		}
		prev = id
		var name string
		var mode uint32
		for _, e := range suspEntries(t, img, r.su) {
			switch string(e[:2]) {
			case "NM":
				if e[4] != 0 {
					t.Errorf("NM flags %#x", e[4])
				}
				name += string(e[5:])
			case "PX":
				mode = both32At(t, e[4:], "PX mode")
			}
		}
		if name == "" {
			t.Errorf("%q has no NM entry", id)
		}
		out[name] = rrFile{isoName: id, mode: mode, data: img[int(r.extent)*sectorSize : int(r.extent)*sectorSize+int(r.size)]}
	}
	return out
}

func checkImage(t *testing.T, img []byte, volumeID string, files []File) {
	t.Helper()
	pvd, svd := readVolumes(t, img)
	checkVolume(t, img, pvd, "PVD")
	checkVolume(t, img, svd, "SVD")
	if got := strings.TrimRight(string(pvd.vd[40:72]), " "); got != volumeID {
		t.Errorf("PVD volume id %q, want %q", got, volumeID)
	}
	wantJ := volumeID[:min(len(volumeID), 16)]
	if got := strings.TrimRight(ucs2(svd.vd[40:72]), " "); got != wantJ {
		t.Errorf("SVD volume id %q, want %q", got, wantJ)
	}
	j := jolietFiles(t, img)
	rr := rockRidgeFiles(t, img)
	if len(j) != len(files) || len(rr) != len(files) {
		t.Errorf("read %d Joliet and %d Rock Ridge files, want %d", len(j), len(rr), len(files))
	}
	seenISO := map[string]bool{}
	for _, f := range files {
		if got, ok := j[f.Name]; !ok || !bytes.Equal(got, f.Data) {
			t.Errorf("Joliet %q: present=%v, data %q, want %q", f.Name, ok, trunc(got), trunc(f.Data))
		}
		r, ok := rr[f.Name]
		if !ok || !bytes.Equal(r.data, f.Data) {
			t.Errorf("Rock Ridge %q: present=%v, data %q, want %q", f.Name, ok, trunc(r.data), trunc(f.Data))
		}
		if r.mode != 0o100444 {
			t.Errorf("Rock Ridge %q: mode %o", f.Name, r.mode)
		}
		if seenISO[r.isoName] {
			t.Errorf("primary name %q used twice", r.isoName)
		}
		seenISO[r.isoName] = true
	}
}

func trunc(b []byte) []byte { return b[:min(len(b), 40)] }

func TestSeedImage(t *testing.T) {
	files := seedFiles()
	img := mustWrite(t, "cidata", files)
	checkImage(t, img, "cidata", files)

	rr := rockRidgeFiles(t, img)
	for name, want := range map[string]string{"meta-data": "META_DAT.;1", "user-data": "USER_DAT.;1", "network-config": "NETWORK_.;1"} {
		if got := rr[name].isoName; got != want {
			t.Errorf("primary name of %q = %q, want %q", name, got, want)
		}
	}
	// Default timestamps are the Unix epoch.
	pvd, _ := readVolumes(t, img)
	if got := string(pvd.vd[813:829]); got != "1970010100000000" {
		t.Errorf("creation date %q", got)
	}
	if !bytes.Equal(pvd.root.date, []byte{70, 1, 1, 0, 0, 0, 0}) {
		t.Errorf("root record date % x", pvd.root.date)
	}
}

func TestManyFiles(t *testing.T) {
	var files []File
	for i := range 300 {
		// Long non-ASCII names force Rock Ridge continuation areas and
		// multi-sector directories; similar prefixes force unique 8.3 names.
		name := fmt.Sprintf("file-%03d-%s.data", i, strings.Repeat("€", 50))
		if i%3 == 0 {
			name = fmt.Sprintf("user-data-%d", i)
		}
		files = append(files, File{Name: name, Data: bytes.Repeat([]byte{byte(i)}, i*37)})
	}
	files = append(files, File{Name: "Meta-Data"}, File{Name: "meta-data"}, File{Name: ".hidden"}, File{Name: "a.b.c.tar.gz"})
	img := mustWrite(t, "CIDATA_WITH_A_LONG_VOLUME_ID_32C", files)
	checkImage(t, img, "CIDATA_WITH_A_LONG_VOLUME_ID_32C", files)
	pvd, svd := readVolumes(t, img)
	if pvd.root.size <= sectorSize || svd.root.size <= sectorSize {
		t.Errorf("expected multi-sector directories, got %d and %d bytes", pvd.root.size, svd.root.size)
	}
}

func TestModTime(t *testing.T) {
	mt := time.Date(2024, 5, 6, 7, 8, 9, 120_000_000, time.FixedZone("X", 3600))
	var b bytes.Buffer
	if err := WriteWithOptions(&b, "cidata", seedFiles(), WriteOptions{ModTime: mt}); err != nil {
		t.Fatal(err)
	}
	pvd, _ := readVolumes(t, b.Bytes())
	if got := string(pvd.vd[830:846]); got != "2024050606080912" {
		t.Errorf("modification date %q", got)
	}
	if !bytes.Equal(pvd.root.date, []byte{124, 5, 6, 6, 8, 9, 0}) {
		t.Errorf("root record date % x", pvd.root.date)
	}
}

func TestDeterministic(t *testing.T) {
	a := mustWrite(t, "cidata", seedFiles())
	b := mustWrite(t, "cidata", seedFiles())
	if !bytes.Equal(a, b) {
		t.Fatal("two writes of the same input differ")
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

func TestWriteError(t *testing.T) {
	for n := range 3 {
		err := Write(&failWriter{n: n}, "cidata", seedFiles())
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("failing after %d writes: got %v", n, err)
		}
	}
}

func TestLevel1Name(t *testing.T) {
	used := map[string]bool{}
	for _, tc := range []struct{ in, want string }{
		{"meta-data", "META_DAT.;1"},
		{"meta-data2", "META_DA1.;1"},
		{"Meta-Data", "META_DA2.;1"},
		{"archive.tar.gz", "ARCHIVE_.GZ;1"},
		{".profile", "_.PRO;1"},
		{"x", "X.;1"},
		{"X", "X1.;1"},
	} {
		if got := level1Name(tc.in, used); got != tc.want {
			t.Errorf("level1Name(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
