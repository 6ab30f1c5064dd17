package vm

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// maxSize bounds every size (8 PiB): beyond it byte counts stop being
// exact in the float64 of JSON readers.
const maxSize = 1 << 53

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([KMGT]?)(I?B?)$`)

// ParseSize parses a size in bytes: plain bytes, or a number with a binary
// unit, K M G T (powers of 1024), spelled 1G, 1Gi, 1GiB or 1GB alike, with
// a fraction where it comes to whole bytes (1.5G). Memory and disk sizes
// share it.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.ToUpper(strings.TrimSpace(s)))
	if m == nil || (m[2] == "" && m[3] == "I") || (m[2] == "" && m[3] == "IB") {
		return 0, fmt.Errorf("bad size %q: want a number with an optional unit K, M, G or T (512M, 1.5G, 10GiB)", s)
	}
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("bad size %q", s)
	}
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m[2]]
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	if !r.IsInt() {
		return 0, fmt.Errorf("bad size %q: not a whole number of bytes", s)
	}
	if r.Num().Cmp(big.NewInt(maxSize)) > 0 {
		return 0, fmt.Errorf("bad size %q: over 8 PiB", s)
	}
	return r.Num().Int64(), nil
}

// MinMemoryMiB is the least memory a VM may have.
const MinMemoryMiB = 16

// ParseMemoryMiB reads a memory size: a bare number is MiB (as QEMU's -m
// and virt's --memory take it), anything else a size as ParseSize reads
// it, which must come to whole MiB and at least MinMemoryMiB.
func ParseMemoryMiB(s string) (int, error) {
	t := strings.TrimSpace(s)
	if t != "" && strings.Trim(t, "0123456789") == "" {
		t += "M"
	}
	b, err := ParseSize(t)
	if err != nil {
		return 0, fmt.Errorf("bad memory size %q: want MiB (512) or a size with a unit (512M, 2G, 1.5GiB)", s)
	}
	if b < MinMemoryMiB<<20 {
		return 0, fmt.Errorf("memory size %q is below the minimum of %d MiB", s, MinMemoryMiB)
	}
	if b%(1<<20) != 0 {
		return 0, fmt.Errorf("memory size %q is not a whole number of MiB", s)
	}
	if b>>20 > maxMemoryMiB {
		return 0, fmt.Errorf("memory size %q is over 16 TiB", s)
	}
	return int(b >> 20), nil
}

const maxMemoryMiB = 16 << 20
