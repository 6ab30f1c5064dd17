package cli

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/vm"
)

// pubKeyLine is an OpenSSH ed25519 public key line for a fresh key.
func pubKeyLine(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	const typ = "ssh-ed25519"
	blob := binary.BigEndian.AppendUint32(nil, uint32(len(typ)))
	blob = append(blob, typ...)
	blob = binary.BigEndian.AppendUint32(blob, uint32(len(pub)))
	blob = append(blob, pub...)
	return typ + " " + base64.StdEncoding.EncodeToString(blob) + " " + comment
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// userDataOf is the stored user data of VM name, as show --show-secrets
// prints it.
func userDataOf(t *testing.T, root, name string) string {
	t.Helper()
	var v vm.VirtualMachine
	if err := json.Unmarshal([]byte(mustRun(t, "--root", root, "vm", "show", name, "--show-secrets", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Spec.CloudInit == nil {
		return ""
	}
	return v.Spec.CloudInit.UserData
}

func TestVMCreateSSHKey(t *testing.T) {
	root, kernel := vmRoot(t)
	k1, k2 := pubKeyLine(t, "a@laptop"), pubKeyLine(t, "b@desk")
	f1 := writeFile(t, root, "a.pub", k1+"\n")
	f2 := writeFile(t, root, "b.pub", "# work\n"+k2+"\n")
	ud := writeFile(t, root, "user.yaml", "#cloud-config\npackages: [htop]\nusers:\n  - default\n")
	script := writeFile(t, root, "user.sh", "#!/bin/sh\necho hello\n")

	tests := []struct {
		name string
		args []string
		want map[string]any
	}{
		{"default user", []string{"--ssh-key", f1, "--ssh-key", f2},
			map[string]any{"ssh_authorized_keys": []any{k1, k2}}},
		{"named user", []string{"--ssh-key", f1, "--user", "ops"},
			map[string]any{"users": []any{map[string]any{"name": "ops", "ssh_authorized_keys": []any{k1},
				"sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/bash", "lock_passwd": true}}}},
		{"a script beside", []string{"--ssh-key", f1, "--cloud-init-user-data", script}, nil},
		{"merged with user data", []string{"--ssh-key", f2, "--user", "ops", "--cloud-init-user-data", ud},
			map[string]any{"packages": []any{"htop"}, "users": []any{"default", map[string]any{"name": "ops", "ssh_authorized_keys": []any{k2},
				"sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/bash", "lock_passwd": true}}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "ssh" + string(rune('a'+i))
			args := append([]string{"--root", root, "vm", "create", name, "--kernel", kernel}, tt.args...)
			_, errOut, code := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if strings.Contains(errOut, "AAAA") {
				t.Errorf("stderr shows a key: %s", errOut)
			}
			got := userDataOf(t, root, name)
			if tt.want == nil { // a script: a MIME multipart of both (vm.CloudConfig's test reads it)
				if !strings.HasPrefix(got, "Content-Type: multipart/mixed") || !strings.Contains(got, "echo hello") || !strings.Contains(got, k1) {
					t.Errorf("user data:\n%s", got)
				}
				return
			}
			if !strings.HasPrefix(got, "#cloud-config\n") {
				t.Fatalf("user data does not start with #cloud-config:\n%s", got)
			}
			var m map[string]any
			if err := yaml.Unmarshal([]byte(got), &m); err != nil {
				t.Fatal(err)
			}
			gy, _ := yaml.Marshal(m)
			wy, _ := yaml.Marshal(tt.want)
			if string(gy) != string(wy) {
				t.Errorf("user data:\n%s\nwant:\n%s", gy, wy)
			}
			// redacted unless asked
			if show := mustRun(t, "--root", root, "vm", "show", name, "-o", "yaml"); strings.Contains(show, "AAAA") {
				t.Errorf("vm show prints the user data:\n%s", show)
			}
		})
	}
}

func TestVMCreateSSHKeyRefuses(t *testing.T) {
	root, kernel := vmRoot(t)
	const secret = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
	priv := writeFile(t, root, "id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\n"+secret+"\n-----END OPENSSH PRIVATE KEY-----\n")
	junk := writeFile(t, root, "junk.pub", secret+"\n")
	good := writeFile(t, root, "ok.pub", pubKeyLine(t, "x")+"\n")
	mimeUD := writeFile(t, root, "user.mime", "Content-Type: multipart/mixed; boundary=X\nMIME-Version: 1.0\n\n--X\n"+secret+"\n")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"private key", []string{"--ssh-key", priv}, []string{"--ssh-key", priv, "private key", ".pub"}},
		{"not a key", []string{"--ssh-key", junk}, []string{"--ssh-key", junk, "line 1", "ssh-ed25519"}},
		{"missing file", []string{"--ssh-key", filepath.Join(root, "nope.pub")}, []string{"--ssh-key", "nope.pub"}},
		{"a directory", []string{"--ssh-key", root}, []string{"--ssh-key", "not a regular file"}},
		{"bad user", []string{"--ssh-key", good, "--user", "Bad User"}, []string{"--user", `"Bad User"`, "unix user name"}},
		{"user without key", []string{"--user", "ops"}, []string{"--user", "needs --ssh-key"}},
		{"MIME user data", []string{"--ssh-key", good, "--cloud-init-user-data", mimeUD}, []string{"--cloud-init-user-data", "MIME multipart", "#cloud-config"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--root", root, "vm", "create", "r" + string(rune('a'+i)), "--kernel", kernel}, tt.args...)
			out, errOut, code := run(t, args...)
			if code != ExitUsage {
				t.Errorf("exit %d; want %d (stderr %s)", code, ExitUsage, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
			if strings.Contains(out+errOut, secret[:20]) {
				t.Errorf("the file's content is echoed: %s%s", out, errOut)
			}
		})
	}
	if entries := ours(t, mustRun(t, "--root", root, "vm", "list", "-o", "json")); len(entries) != 0 {
		t.Errorf("refused creates left VMs: %+v", entries)
	}
}
