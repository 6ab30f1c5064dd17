package vm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/internal/fielderr"
)

// Errors of the SSH-access cloud-config (`virt vm create --ssh-key
// --user`): bad input, each errors.Is ErrInvalid.
var (
	// ErrSSHKey is a file that is not one or more SSH public keys.
	ErrSSHKey = fielderr.NewKind("not an ssh public key", ErrInvalid)
	// ErrSSHPrivateKey is a private key given where the public one was
	// wanted. Its content is never echoed.
	ErrSSHPrivateKey = fielderr.NewKind("an ssh private key, not a public one", ErrInvalid)
	// ErrUserName is a user name that is not a Unix user name.
	ErrUserName = fielderr.NewKind("not a unix user name", ErrInvalid)
	// ErrUserDataNotMergeable is user data that is not a #cloud-config
	// document (a script, MIME multipart, an #include…): the SSH access
	// cannot be merged into it.
	ErrUserDataNotMergeable = fielderr.NewKind("user data is not #cloud-config", ErrInvalid)
)

// SSHAccess is what `--ssh-key` and `--user` ask for: Keys authorised
// for User, or, with no User, for the image's default user.
type SSHAccess struct {
	User string
	Keys []string
}

// sshKeyTypes are the public key types accepted, as the key's first
// field and inside its blob.
var sshKeyTypes = map[string]bool{
	"ssh-ed25519":                        true,
	"ssh-rsa":                            true,
	"ecdsa-sha2-nistp256":                true,
	"ecdsa-sha2-nistp384":                true,
	"ecdsa-sha2-nistp521":                true,
	"sk-ssh-ed25519@openssh.com":         true,
	"sk-ecdsa-sha2-nistp256@openssh.com": true,
}

// ParseSSHPublicKeys reads an OpenSSH public key file (one key a line;
// blank lines and # comments skipped) and returns its keys, each
// "type base64 [comment]". source names the file in errors. A line is
// never echoed: a private key given by mistake must not reach a
// terminal, a log or a scrollback.
func ParseSSHPublicKeys(data []byte, source string) ([]string, error) {
	if bytes.Contains(data, []byte("PRIVATE KEY-----")) {
		return nil, fmt.Errorf("%s: %w: give the public key (the .pub file next to it); its content is not shown", source, ErrSSHPrivateKey)
	}
	var keys []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := checkSSHKeyLine(line); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w: %v", source, i+1, ErrSSHKey, err)
		}
		keys = append(keys, line)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: %w: no key in the file", source, ErrSSHKey)
	}
	return keys, nil
}

// checkSSHKeyLine checks one "type base64 [comment]" line: a known type,
// and a blob that decodes and names the same type. Its errors quote the
// type only when it is a known one.
func checkSSHKeyLine(line string) error {
	f := strings.Fields(line)
	if !sshKeyTypes[f[0]] {
		return errors.New("want a line starting with ssh-ed25519, ssh-rsa, ecdsa-sha2-* or sk-* (authorized_keys options are not accepted)")
	}
	if len(f) < 2 {
		return fmt.Errorf("a %s key without its base64 part", f[0])
	}
	blob, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return fmt.Errorf("the %s key's base64 part does not decode", f[0])
	}
	if len(blob) < 4 {
		return fmt.Errorf("the %s key's blob is cut short", f[0])
	}
	n := binary.BigEndian.Uint32(blob)
	if uint64(n) > uint64(len(blob)-4) || string(blob[4:4+n]) != f[0] {
		return fmt.Errorf("the key's blob is not a %s key", f[0])
	}
	return nil
}

// unixUserName is what useradd accepts by default (NAME_REGEX of
// adduser.conf), at most 32 characters.
var unixUserName = regexp.MustCompile(`^[a-z_][a-z0-9_-]*\$?$`)

// ValidateUserName checks a Unix user name for --user.
func ValidateUserName(name string) error {
	if len(name) > 32 || !unixUserName.MatchString(name) {
		return fmt.Errorf("user %q: %w: want lower-case letters, digits, _ and -, starting with a letter or _, at most 32 characters", name, ErrUserName)
	}
	return nil
}

// CloudConfig returns the user data that gives a.Keys SSH access: with
// a.User, a user of that name (sudo without a password, /bin/bash, its
// password locked); without, the image's default user (top-level
// ssh_authorized_keys). userData, when not empty, is a #cloud-config
// document, into which the access is merged as YAML (the users list and
// ssh_authorized_keys extended, the rest kept as written), or a script
// (#!), which goes with the access's cloud-config into a MIME multipart.
// Other user data (MIME multipart already, an #include, a template) is
// refused with ErrUserDataNotMergeable rather than guessed at. The result
// is a secret like any user data.
func CloudConfig(a SSHAccess, userData string) (string, error) {
	if a.User != "" {
		if err := ValidateUserName(a.User); err != nil {
			return "", err
		}
	}
	if len(a.Keys) == 0 {
		return "", fmt.Errorf("%w: no key given (--user needs --ssh-key)", ErrSSHKey)
	}
	for i, k := range a.Keys {
		if err := checkSSHKeyLine(k); err != nil {
			return "", fmt.Errorf("key %d: %w: %v", i+1, ErrSSHKey, err)
		}
	}
	var script string
	if strings.HasPrefix(userData, "#!") {
		// a script stays a script: it goes next to the cloud-config in
		// a MIME multipart, which cloud-init runs part by part
		script, userData = userData, ""
	}
	root, err := cloudConfigRoot(userData)
	if err != nil {
		return "", err
	}
	if a.User == "" {
		if err := addKeys(root, "ssh_authorized_keys", a.Keys); err != nil {
			return "", err
		}
	} else if err := addUser(root, a); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	buf.WriteString("#cloud-config\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return "", fmt.Errorf("cloud-config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("cloud-config: %w", err)
	}
	if script != "" {
		return multipartUserData(buf.String(), script)
	}
	return buf.String(), nil
}

// multipartUserData is cloud-init's MIME multipart of a cloud-config and
// a script (cloud-init's own make-mime shape): the cloud-config first,
// then the script, run once on the first boot as any user-data script.
func multipartUserData(cloudConfig, script string) (string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	// a boundary that cannot occur in either part
	b := "==virtcon-boundary=="
	for i := 0; strings.Contains(cloudConfig+script, b); i++ {
		b = fmt.Sprintf("==virtcon-boundary-%d==", i)
	}
	if err := w.SetBoundary(b); err != nil {
		return "", fmt.Errorf("user data: %w", err)
	}
	fmt.Fprintf(&buf, "Content-Type: multipart/mixed; boundary=%q\r\nMIME-Version: 1.0\r\n\r\n", b)
	for _, p := range []struct{ typ, name, body string }{
		{"text/cloud-config", "virtcon-ssh.cfg", cloudConfig},
		{"text/x-shellscript", "user-data-script", script},
	} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", p.typ+`; charset="utf-8"`)
		h.Set("MIME-Version", "1.0")
		h.Set("Content-Transfer-Encoding", "8bit")
		h.Set("Content-Disposition", `attachment; filename="`+p.name+`"`)
		pw, err := w.CreatePart(h)
		if err != nil {
			return "", fmt.Errorf("user data: %w", err)
		}
		if _, err := io.WriteString(pw, p.body); err != nil {
			return "", fmt.Errorf("user data: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("user data: %w", err)
	}
	return buf.String(), nil
}

// cloudConfigRoot parses user data as a #cloud-config mapping; empty
// user data is an empty mapping.
func cloudConfigRoot(userData string) (*yaml.Node, error) {
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if strings.TrimSpace(userData) == "" {
		return root, nil
	}
	first, _, _ := strings.Cut(userData, "\n")
	if strings.TrimRight(first, " \t\r") != "#cloud-config" {
		what := "it does not start with a #cloud-config line"
		switch {
		case strings.HasPrefix(strings.ToLower(first), "content-type:") || strings.HasPrefix(strings.ToLower(first), "mime-version:"):
			what = "it is MIME multipart"
		case strings.HasPrefix(first, "#include"):
			what = "it is an #include list"
		}
		return nil, fmt.Errorf("--cloud-init-user-data: %w: %s; --ssh-key/--user merge only into a #cloud-config file or go beside a #! script (put the keys in your file yourself)", ErrUserDataNotMergeable, what)
	}
	// the #cloud-config line is written again above the merged document:
	// parse what follows it (a blank line keeps YAML's line numbers)
	_, body, _ := strings.Cut(userData, "\n")
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("\n"+body), &doc); err != nil {
		return nil, fmt.Errorf("--cloud-init-user-data: %w: not valid YAML: %v", ErrUserDataNotMergeable, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return root, nil // only the #cloud-config line and comments
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return root, nil
	}
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("--cloud-init-user-data: %w: its top level is not a mapping of keys", ErrUserDataNotMergeable)
	}
	if doc.HeadComment != "" {
		m.HeadComment = strings.TrimSpace(doc.HeadComment + "\n" + m.HeadComment)
	}
	return m, nil
}

// lookup returns the value node of key in mapping m, nil when absent.
func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func keySeq(keys []string) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, k := range keys {
		seq.Content = append(seq.Content, scalar(k))
	}
	return seq
}

// addKeys appends keys to the sequence under key in m (made when absent),
// skipping those already there.
func addKeys(m *yaml.Node, key string, keys []string) error {
	seq := lookup(m, key)
	if seq == nil {
		m.Content = append(m.Content, scalar(key), keySeq(keys))
		return nil
	}
	if seq.Kind == yaml.ScalarNode && seq.Tag == "!!null" {
		*seq = *keySeq(keys)
		return nil
	}
	if seq.Kind != yaml.SequenceNode {
		return fmt.Errorf("--cloud-init-user-data: %w: %s is not a list", ErrUserDataNotMergeable, key)
	}
	have := map[string]bool{}
	for _, n := range seq.Content {
		have[strings.TrimSpace(n.Value)] = true
	}
	for _, k := range keys {
		if !have[k] {
			seq.Content = append(seq.Content, scalar(k))
		}
	}
	return nil
}

// addUser adds a.User to m's users list (made when absent). A user of
// that name already in the list gets the keys added to its own
// ssh_authorized_keys and keeps the rest as written.
func addUser(m *yaml.Node, a SSHAccess) error {
	users := lookup(m, "users")
	if users != nil && users.Kind == yaml.ScalarNode && users.Tag == "!!null" {
		*users = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	}
	if users == nil {
		users = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		m.Content = append(m.Content, scalar("users"), users)
	}
	if users.Kind != yaml.SequenceNode {
		return fmt.Errorf("--cloud-init-user-data: %w: users is not a list (write it as a YAML list to merge --user into it)", ErrUserDataNotMergeable)
	}
	for _, u := range users.Content {
		if u.Kind == yaml.MappingNode {
			if n := lookup(u, "name"); n != nil && n.Value == a.User {
				return addKeys(u, "ssh_authorized_keys", a.Keys)
			}
		}
	}
	u := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	u.Content = append(u.Content,
		scalar("name"), scalar(a.User),
		scalar("ssh_authorized_keys"), keySeq(a.Keys),
		scalar("sudo"), scalar("ALL=(ALL) NOPASSWD:ALL"),
		scalar("shell"), scalar("/bin/bash"),
		scalar("lock_passwd"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
	)
	users.Content = append(users.Content, u)
	return nil
}
