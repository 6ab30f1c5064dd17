package vm

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// testKey is an OpenSSH public key line of type typ with a well-formed
// blob (the type, then filler bytes).
func testKey(typ, comment string) string {
	blob := binary.BigEndian.AppendUint32(nil, uint32(len(typ)))
	blob = append(blob, typ...)
	blob = append(blob, make([]byte, 32)...)
	k := typ + " " + base64.StdEncoding.EncodeToString(blob)
	if comment != "" {
		k += " " + comment
	}
	return k
}

func TestParseSSHPublicKeys(t *testing.T) {
	ed, rsa := testKey("ssh-ed25519", "me@laptop"), testKey("ssh-rsa", "")
	ecdsa, sk := testKey("ecdsa-sha2-nistp256", "x"), testKey("sk-ssh-ed25519@openssh.com", "yubi")
	// a blob of another type under this type's name
	lying := "ssh-ed25519 " + strings.Fields(rsa)[1]
	const secret = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
	private := "-----BEGIN OPENSSH PRIVATE KEY-----\n" + secret + "\n-----END OPENSSH PRIVATE KEY-----\n"
	tests := []struct {
		name    string
		data    string
		want    []string
		wantErr error
	}{
		{"one ed25519", ed + "\n", []string{ed}, nil},
		{"several with comments and blank lines", "# mine\n" + ed + "\n\n" + rsa + "\r\n" + ecdsa + "\n" + sk, []string{ed, rsa, ecdsa, sk}, nil},
		{"private key refused", private, nil, ErrSSHPrivateKey},
		{"pem rsa private key refused", "-----BEGIN RSA PRIVATE KEY-----\n" + secret + "\n-----END RSA PRIVATE KEY-----\n", nil, ErrSSHPrivateKey},
		{"empty", "\n# nothing\n", nil, ErrSSHKey},
		{"unknown type", "ssh-dss AAAAB3NzaC1kc3MAAACBAP\n", nil, ErrSSHKey},
		{"options prefix", `from="10.0.0.1" ` + ed, nil, ErrSSHKey},
		{"no blob", "ssh-ed25519\n", nil, ErrSSHKey},
		{"bad base64", "ssh-ed25519 !!!notbase64 c\n", nil, ErrSSHKey},
		{"blob of another type", lying, nil, ErrSSHKey},
		{"garbage line after a good one", ed + "\n" + secret + "\n", nil, ErrSSHKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSSHPublicKeys([]byte(tt.data), "id.pub")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v; want %v (and ErrInvalid)", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[:16]) {
					t.Errorf("err echoes the file's content: %v", err)
				}
				if !strings.Contains(err.Error(), "id.pub") {
					t.Errorf("err %q does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("keys = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestValidateUserName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"alice", true}, {"_svc", true}, {"ops-1", true}, {"user$", true}, {"a23456789012345678901234567890ab", true},
		{"", false}, {"Alice", false}, {"1abc", false}, {"-x", false}, {"a b", false}, {"a:b", false},
		{"../etc", false}, {"a23456789012345678901234567890abc", false}, {"al\nice", false},
	} {
		err := ValidateUserName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateUserName(%q) = %v; want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrUserName) {
			t.Errorf("ValidateUserName(%q) = %v; want ErrUserName", tt.name, err)
		}
	}
}

// decodeCloudConfig checks the #cloud-config line and parses the rest.
func decodeCloudConfig(t *testing.T, s string) map[string]any {
	t.Helper()
	if !strings.HasPrefix(s, "#cloud-config\n") {
		t.Fatalf("user data does not start with #cloud-config:\n%s", s)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, s)
	}
	return m
}

func TestCloudConfig(t *testing.T) {
	k1, k2 := testKey("ssh-ed25519", "one"), testKey("ssh-rsa", "two")
	ours := func(keys ...string) map[string]any {
		ks := make([]any, len(keys))
		for i, k := range keys {
			ks[i] = k
		}
		return map[string]any{"name": "alice", "ssh_authorized_keys": ks, "sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/bash", "lock_passwd": true}
	}
	tests := []struct {
		name     string
		access   SSHAccess
		userData string
		want     map[string]any
	}{
		{"default user", SSHAccess{Keys: []string{k1, k2}}, "",
			map[string]any{"ssh_authorized_keys": []any{k1, k2}}},
		{"named user", SSHAccess{User: "alice", Keys: []string{k1}}, "",
			map[string]any{"users": []any{ours(k1)}}},
		{"merged: the user's keys kept, ours added once", SSHAccess{Keys: []string{k1, k2}},
			"#cloud-config\n# keep me\npackage_update: true\nssh_authorized_keys:\n  - " + k1 + "\n",
			map[string]any{"package_update": true, "ssh_authorized_keys": []any{k1, k2}}},
		{"merged into a users list", SSHAccess{User: "alice", Keys: []string{k1}},
			"#cloud-config\nusers:\n  - default\n  - name: bob\n    groups: [adm]\nruncmd: [[touch, /x]]\n",
			map[string]any{"users": []any{"default", map[string]any{"name": "bob", "groups": []any{"adm"}}, ours(k1)},
				"runcmd": []any{[]any{"touch", "/x"}}}},
		{"same user in the file: keys added to it", SSHAccess{User: "alice", Keys: []string{k1}},
			"#cloud-config\nusers:\n  - name: alice\n    shell: /bin/zsh\n    ssh_authorized_keys: [" + k2 + "]\n",
			map[string]any{"users": []any{map[string]any{"name": "alice", "shell": "/bin/zsh", "ssh_authorized_keys": []any{k2, k1}}}}},
		{"users: empty", SSHAccess{User: "alice", Keys: []string{k1}}, "#cloud-config\nusers:\n",
			map[string]any{"users": []any{ours(k1)}}},
		{"only the header", SSHAccess{Keys: []string{k1}}, "#cloud-config\n# nothing yet\n",
			map[string]any{"ssh_authorized_keys": []any{k1}}},
		{"header with trailing space and CRLF", SSHAccess{Keys: []string{k1}}, "#cloud-config \r\nhostname: h\r\n",
			map[string]any{"hostname": "h", "ssh_authorized_keys": []any{k1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CloudConfig(tt.access, tt.userData)
			if err != nil {
				t.Fatal(err)
			}
			m := decodeCloudConfig(t, got)
			gy, _ := yaml.Marshal(m)
			wy, _ := yaml.Marshal(tt.want)
			if string(gy) != string(wy) {
				t.Errorf("cloud-config:\n%s\nwant (as YAML):\n%s", got, wy)
			}
			if strings.Contains(tt.userData, "# keep me") && !strings.Contains(got, "# keep me") {
				t.Errorf("the user's comment is lost:\n%s", got)
			}
			if strings.Count(got, "#cloud-config") != 1 {
				t.Errorf("#cloud-config written %d times:\n%s", strings.Count(got, "#cloud-config"), got)
			}
		})
	}
}

func TestCloudConfigRefuses(t *testing.T) {
	k := testKey("ssh-ed25519", "")
	tests := []struct {
		name     string
		access   SSHAccess
		userData string
		wantErr  error
		wantText string
	}{
		{"mime", SSHAccess{Keys: []string{k}}, "Content-Type: multipart/mixed; boundary=X\nMIME-Version: 1.0\n", ErrUserDataNotMergeable, "MIME"},
		{"include", SSHAccess{Keys: []string{k}}, "#include\nhttp://x/y\n", ErrUserDataNotMergeable, "#include"},
		{"no header", SSHAccess{Keys: []string{k}}, "users: []\n", ErrUserDataNotMergeable, "#cloud-config"},
		{"bad yaml", SSHAccess{Keys: []string{k}}, "#cloud-config\nusers: [\n", ErrUserDataNotMergeable, "YAML"},
		{"top level a list", SSHAccess{Keys: []string{k}}, "#cloud-config\n- a\n", ErrUserDataNotMergeable, "mapping"},
		{"users a string", SSHAccess{User: "alice", Keys: []string{k}}, "#cloud-config\nusers: default, bob\n", ErrUserDataNotMergeable, "users is not a list"},
		{"keys a string", SSHAccess{Keys: []string{k}}, "#cloud-config\nssh_authorized_keys: x\n", ErrUserDataNotMergeable, "not a list"},
		{"bad user", SSHAccess{User: "Root!", Keys: []string{k}}, "", ErrUserName, `"Root!"`},
		{"no keys", SSHAccess{User: "alice"}, "", ErrSSHKey, "--ssh-key"},
		{"bad key", SSHAccess{Keys: []string{"ssh-ed25519 AAAA"}}, "", ErrSSHKey, "key 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CloudConfig(tt.access, tt.userData)
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v; want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err %q lacks %q", err, tt.wantText)
			}
		})
	}
}

// A script stays a script: the access's cloud-config and the script go
// into a MIME multipart, each part byte for byte.
func TestCloudConfigWithScript(t *testing.T) {
	k := testKey("ssh-ed25519", "me")
	for _, script := range []string{
		"#!/bin/sh\necho hi > /tmp/x\n",
		// the default boundary in the script: another is chosen
		"#!/bin/bash\n# --==virtcon-boundary==\necho ünïcode\n",
	} {
		got, err := CloudConfig(SSHAccess{User: "ops", Keys: []string{k}}, script)
		if err != nil {
			t.Fatal(err)
		}
		head, body, ok := strings.Cut(got, "\r\n\r\n")
		if !ok || !strings.Contains(head, "MIME-Version: 1.0") {
			t.Fatalf("no MIME header:\n%s", got)
		}
		mt, params, err := mime.ParseMediaType(strings.TrimPrefix(strings.Split(head, "\r\n")[0], "Content-Type: "))
		if err != nil || mt != "multipart/mixed" {
			t.Fatalf("Content-Type %q: %v", mt, err)
		}
		r := multipart.NewReader(strings.NewReader(body), params["boundary"])
		var types, bodies []string
		for {
			p, err := r.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("part: %v\n%s", err, got)
			}
			b, _ := io.ReadAll(p)
			types = append(types, p.Header.Get("Content-Type"))
			bodies = append(bodies, string(b))
		}
		if len(types) != 2 || !strings.HasPrefix(types[0], "text/cloud-config") || !strings.HasPrefix(types[1], "text/x-shellscript") {
			t.Fatalf("parts %q; want text/cloud-config, text/x-shellscript", types)
		}
		cc := decodeCloudConfig(t, bodies[0])
		if u, _ := cc["users"].([]any); len(u) != 1 {
			t.Errorf("cloud-config part: %v", cc)
		}
		if bodies[1] != script {
			t.Errorf("script part %q; want %q", bodies[1], script)
		}
	}
}
