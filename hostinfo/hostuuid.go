package hostinfo

import (
	"fmt"
	"strings"
)

// dummyUUIDs are product UUIDs that firmware ships on many boards alike
// (unset DMI fields, the AMI/Gigabyte placeholder in both byte orders):
// they name no machine.
var dummyUUIDs = map[string]bool{
	"03000200-0400-0500-0006-000700080009": true,
	"00020003-0004-0005-0006-000700080009": true,
	"12345678-1234-5678-90ab-cddeefaabbcc": true,
}

// HostUUID is the machine's own UUID, lowercase 8-4-4-4-12: the DMI
// product UUID (sys/class/dmi/id/product_uuid, readable by root only)
// when it is a real one, not all zeros, all F or a known placeholder
// that firmware puts on every board; else the systemd machine id
// (etc/machine-id, 32 hex digits) written as a UUID. Both under root ("/"
// for the live machine). An error says why neither would do.
func HostUUID(root string) (string, error) {
	h := hostFS{root: root}
	dmi, err := h.readString("sys/class/dmi/id/product_uuid")
	if err == nil {
		u, ok := saneUUID(dmi)
		if ok {
			return u, nil
		}
		err = fmt.Errorf("%q is no machine's UUID", dmi)
	}
	dmiErr := err
	mid, err := h.readString("etc/machine-id")
	if err == nil {
		u, ok := machineIDUUID(mid)
		if ok {
			return u, nil
		}
		err = fmt.Errorf("%q: want 32 hex digits, not all zero", mid)
	}
	return "", fmt.Errorf("host uuid: %s: %w; %s: %w", h.path("sys/class/dmi/id/product_uuid"), dmiErr, h.path("etc/machine-id"), err)
}

// saneUUID returns s as a lowercase UUID if it is one that names a
// machine.
func saneUUID(s string) (string, bool) {
	u := strings.ToLower(strings.TrimSpace(s))
	if !isUUID(u) || dummyUUIDs[u] {
		return "", false
	}
	digits := strings.ReplaceAll(u, "-", "")
	if strings.Trim(digits, "0") == "" || strings.Trim(digits, "f") == "" {
		return "", false
	}
	return u, true
}

func machineIDUUID(s string) (string, bool) {
	id := strings.ToLower(strings.TrimSpace(s))
	if len(id) != 32 || !isHex(id) || strings.Trim(id, "0") == "" {
		return "", false
	}
	return id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32], true
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i : i+1]) {
				return false
			}
		}
	}
	return true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
