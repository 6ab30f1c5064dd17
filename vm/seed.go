package vm

import (
	"bytes"
	"fmt"
	"os"
	"regexp"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/iso9660"
)

// seedISO builds the NoCloud seed (volume label cidata) in memory and
// writes it 0600: user data is a secret, so it never goes to a temp file
// outside the VM's directory, nor to a log.
func writeSeed(path string, vm *VirtualMachine) error {
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", vm.Metadata.UID, vm.Metadata.Name)
	user := "#cloud-config\n{}\n"
	var netcfg string
	if ci := vm.Spec.CloudInit; ci != nil {
		if ci.MetaData != "" {
			// the instance-id is always the UID: cloud-init keys first-boot on it
			meta = fmt.Sprintf("instance-id: %s\n%s", vm.Metadata.UID, stripInstanceID(ci.MetaData))
		}
		if ci.UserData != "" {
			user = ci.UserData
		}
		netcfg = ci.NetworkConfig
	}
	files := []iso9660.File{{Name: "meta-data", Data: []byte(meta)}, {Name: "user-data", Data: []byte(user)}}
	if netcfg != "" {
		files = append(files, iso9660.File{Name: "network-config", Data: []byte(netcfg)})
	}
	var buf bytes.Buffer
	if err := iso9660.Write(&buf, "cidata", files); err != nil {
		return fmt.Errorf("seed ISO: %w", err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, buf.Bytes()) {
		return nil // unchanged since the last start: spare the fsync
	}
	return atomicfile.Write(path, buf.Bytes(), 0o600)
}

// instanceIDKey matches an instance-id key line in any YAML spelling
// (quoted, space before the colon): a second key left in would win in
// cloud-init's YAML loader, which keeps the last of duplicate keys.
var instanceIDKey = regexp.MustCompile(`^\s*(instance-id|"instance-id"|'instance-id')\s*:`)

func stripInstanceID(meta string) string {
	var out bytes.Buffer
	for _, line := range bytes.Split([]byte(meta), []byte("\n")) {
		if instanceIDKey.Match(line) {
			continue
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.String()
}
