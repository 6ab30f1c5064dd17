package hostinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostUUID(t *testing.T) {
	t.Parallel()
	const mid = "3d1219c7c4c5404aaa1f6d2a48adfda4"
	const midUUID = "3d1219c7-c4c5-404a-aa1f-6d2a48adfda4"
	tests := []struct {
		name      string
		dmi, mid  *string // nil: no such file
		want      string
		wantErrIn string
	}{
		{name: "dmi uuid", dmi: ptr("4C4C4544-0042-3510-8052-B4C04F564E32\n"), mid: ptr(mid), want: "4c4c4544-0042-3510-8052-b4c04f564e32"},
		{name: "dmi all zero", dmi: ptr("00000000-0000-0000-0000-000000000000"), mid: ptr(mid), want: midUUID},
		{name: "dmi all F", dmi: ptr("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"), mid: ptr(mid), want: midUUID},
		{name: "dmi AMI placeholder", dmi: ptr("03000200-0400-0500-0006-000700080009"), mid: ptr(mid), want: midUUID},
		{name: "dmi placeholder swapped", dmi: ptr("00020003-0004-0005-0006-000700080009"), mid: ptr(mid), want: midUUID},
		{name: "dmi not a uuid", dmi: ptr("Not Settable"), mid: ptr(mid), want: midUUID},
		{name: "no dmi (container, non-root)", mid: ptr(mid + "\n"), want: midUUID},
		{name: "machine-id upper case", mid: ptr(strings.ToUpper(mid)), want: midUUID},
		{name: "machine-id uninitialized", mid: ptr("uninitialized"), wantErrIn: `"uninitialized": want 32 hex digits`},
		{name: "machine-id all zero", mid: ptr(strings.Repeat("0", 32)), wantErrIn: "want 32 hex digits"},
		{name: "neither", wantErrIn: "product_uuid"},
		{name: "bad dmi, no machine-id", dmi: ptr("00000000-0000-0000-0000-000000000000"), wantErrIn: "is no machine's UUID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if tt.dmi != nil {
				writeUUIDFile(t, filepath.Join(root, "sys/class/dmi/id/product_uuid"), *tt.dmi)
			}
			if tt.mid != nil {
				writeUUIDFile(t, filepath.Join(root, "etc/machine-id"), *tt.mid)
			}
			got, err := HostUUID(root)
			if tt.wantErrIn != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrIn) {
					t.Fatalf("HostUUID = %q, %v; want an error containing %q", got, err, tt.wantErrIn)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("HostUUID = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func writeUUIDFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
