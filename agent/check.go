package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/paths"
)

// Finding statuses.
const (
	FindingPass = "PASS"
	FindingWarn = "WARN"
	FindingFail = "FAIL"
)

// Finding is one result of ConfigCheck.
type Finding struct {
	ID     string `json:"id" yaml:"id"`
	Status string `json:"status" yaml:"status"`
	Detail string `json:"detail" yaml:"detail"`
}

// ConfigCheck checks the local credentials without contacting the
// director: modes (dir 0700, files 0600), agent.yaml valid, identity.pem
// a key with its certificate, that certificate chaining to ca.pem for
// client authentication and naming the node of agent.yaml, the pin equal
// to ca.pem's, the certificate's validity, and no alert. Not enrolled is
// ErrNotEnrolled; everything else is a finding.
func ConfigCheck(l paths.Layout) ([]Finding, error) {
	return configCheck(l, time.Now())
}

func configCheck(l paths.Layout, now time.Time) ([]Finding, error) {
	if _, err := os.Lstat(IdentityFile(l)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrNotEnrolled, IdentityFile(l))
	}
	var out []Finding
	add := func(id, status, detail string) { out = append(out, Finding{ID: id, Status: status, Detail: detail}) }

	out = append(out, modeFinding("agent.dir", l.AgentDir(), dirMode|fs.ModeDir))
	for _, f := range []struct{ id, path string }{
		{"agent.identity.mode", IdentityFile(l)}, {"agent.ca.mode", CAFile(l)}, {"agent.config.mode", ConfigFile(l)},
	} {
		out = append(out, modeFinding(f.id, f.path, fileMode))
	}
	if _, err := os.Lstat(PendingKeyFile(l)); err == nil {
		add("agent.pending-key", FindingWarn, PendingKeyFile(l)+" is left from an enrolment that did not finish (a new enrolment reuses it)")
	}

	cfg, cfgErr := loadConfig(l)
	if cfgErr != nil {
		add("agent.config", FindingFail, cfgErr.Error())
	} else {
		add("agent.config", FindingPass, fmt.Sprintf("director %s, node %s", cfg.Director, cfg.NodeID))
	}
	leaf, chain, idErr := loadIdentityParts(l)
	root, rootErr := loadRoot(l)
	switch {
	case idErr != nil:
		add("agent.identity", FindingFail, idErr.Error())
	default:
		add("agent.identity", FindingPass, fmt.Sprintf("P-256 key with certificate serial %s (CN %s)", serialOf(leaf), leaf.Subject.CommonName))
	}
	if rootErr != nil {
		add("agent.ca", FindingFail, rootErr.Error())
	} else {
		add("agent.ca", FindingPass, fmt.Sprintf("root CA %q, %s", root.Subject.CommonName, enroll.SPKIPin(root)))
	}
	if idErr == nil && rootErr == nil {
		if err := verifyLeaf(leaf, chain, root, leaf.NotBefore.Add(time.Second)); err != nil {
			add("agent.chain", FindingFail, fmt.Sprintf("the certificate does not chain to %s: %v", CAFile(l), err))
		} else {
			add("agent.chain", FindingPass, "the certificate chains to "+CAFile(l)+" for client authentication")
		}
	}
	if cfgErr == nil && rootErr == nil {
		if pin := enroll.SPKIPin(root); pin != cfg.Pin {
			add("agent.pin", FindingFail, fmt.Sprintf("agent.yaml pin %s, but ca.pem's is %s", cfg.Pin, pin))
		} else {
			add("agent.pin", FindingPass, "agent.yaml's pin is ca.pem's")
		}
	}
	if cfgErr == nil && idErr == nil {
		node, err := enroll.NodeIDFromCert(leaf)
		switch {
		case err != nil:
			add("agent.node", FindingFail, err.Error())
		case node != cfg.NodeID:
			add("agent.node", FindingFail, fmt.Sprintf("the certificate is for node %s, agent.yaml says %s", node, cfg.NodeID))
		default:
			add("agent.node", FindingPass, "node "+node)
		}
	}
	if idErr == nil {
		out = append(out, expiryFinding(leaf, now))
	}
	if a, err := readAlert(l); err != nil {
		add("agent.alert", FindingFail, err.Error())
	} else if a != nil {
		add("agent.alert", FindingFail, fmt.Sprintf("%s at %s: %s (enrol again)", a.Kind, a.At.Format(time.RFC3339), a.Reason))
	}
	return out, nil
}

// loadIdentityParts reads identity.pem alone; err is non-nil when it
// does not load.
func loadIdentityParts(l paths.Layout) (leaf *x509.Certificate, chain []*x509.Certificate, err error) {
	b, err := os.ReadFile(IdentityFile(l))
	if err != nil {
		return nil, nil, err
	}
	_, certs, err := parseIdentity(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", IdentityFile(l), err)
	}
	return certs[0], certs[1:], nil
}

func loadRoot(l paths.Layout) (*x509.Certificate, error) {
	b, err := os.ReadFile(CAFile(l))
	if err != nil {
		return nil, err
	}
	c, err := parseOneCert(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAFile(l), err)
	}
	return c, nil
}

func modeFinding(id, path string, want fs.FileMode) Finding {
	st, err := os.Lstat(path)
	switch {
	case err != nil:
		return Finding{ID: id, Status: FindingFail, Detail: err.Error()}
	case st.Mode().Type() != want.Type():
		return Finding{ID: id, Status: FindingFail, Detail: fmt.Sprintf("%s is a %s, want a %s", path, typeName(st.Mode()), typeName(want))}
	case st.Mode().Perm() != want.Perm():
		return Finding{ID: id, Status: FindingFail, Detail: fmt.Sprintf("%s has mode %04o, want %04o (chmod %o %s)", path, st.Mode().Perm(), want.Perm(), want.Perm(), path)}
	}
	return Finding{ID: id, Status: FindingPass, Detail: fmt.Sprintf("%s mode %04o", path, want.Perm())}
}

func typeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}

// expiryFinding: FAIL past NotAfter (or before NotBefore), WARN past the
// renewal window's end (a running agent should have renewed by then),
// PASS otherwise.
func expiryFinding(leaf *x509.Certificate, now time.Time) Finding {
	f := Finding{ID: "agent.expiry"}
	late := enroll.RenewAt(leaf.NotBefore, leaf.NotAfter, 1)
	switch {
	case !now.Before(leaf.NotAfter):
		f.Status, f.Detail = FindingFail, fmt.Sprintf("the certificate expired at %s: enrol again", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		f.Status, f.Detail = FindingFail, fmt.Sprintf("the certificate is valid only from %s: is this host's clock right?", leaf.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(late):
		f.Status, f.Detail = FindingWarn, fmt.Sprintf("valid until %s, past its renewal window: is virt agent run running and connected?", leaf.NotAfter.UTC().Format(time.RFC3339))
	default:
		f.Status, f.Detail = FindingPass, fmt.Sprintf("valid until %s (%s left)", leaf.NotAfter.UTC().Format(time.RFC3339), leaf.NotAfter.Sub(now).Round(time.Hour))
	}
	return f
}
