package director

import (
	"time"

	"github.com/virtcon/virtcon/api/directorv1"
)

// Key prefixes under the store's prefix (see doc.go).
const (
	keyAdvertise = "config/advertise"
	keyCA        = "ca/sealed"
	preTokens    = "tokens/"
	preNodes     = "nodes/"
	preCerts     = "certs/"
	preRevoked   = "revoked/"
	preNodeState = "nodestate/"
	preReports   = "reports/"
	preAudit     = "audit/"
	// director tasks and inventory
	preTasks      = "tasks/"
	preTaskStatus = "taskstatus/"
	preTaskIDs    = "taskids/"
	preTaskData   = "taskdata/"
	preInventory  = "inventory/"
	preResync     = "resync/"
)

// recordVersion is the "v" of every value the director writes.
const recordVersion = 1

// retryWindow is how long after a token's use the same key gets the
// same certificate again (a retry after a lost reply).
const retryWindow = 10 * time.Minute

// ms is t in Unix milliseconds, 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMS is the inverse of ms.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// caRecord is the CA as etcd holds it: certificates and sealed keys only.
type caRecord struct {
	V                int    `json:"v"`
	RootCert         []byte `json:"rootCert"`
	IntermediateCert []byte `json:"intermediateCert"`
	RootKey          []byte `json:"rootKeySealed"`
	IntermediateKey  []byte `json:"intermediateKeySealed"`
}

// advertiseRecord is config/advertise.
type advertiseRecord struct {
	V    int    `json:"v"`
	Addr string `json:"addr"`
}

// tokenRecord is tokens/<id>. The secret is never stored: only its
// SHA-256 (enroll.HashSecret).
type tokenRecord struct {
	V         int        `json:"v"`
	ID        string     `json:"id"`
	Hash      string     `json:"hash"`
	CreatedAt int64      `json:"createdAt"`
	ExpiresAt int64      `json:"expiresAt"`
	MaxUses   uint32     `json:"maxUses"`
	Uses      []tokenUse `json:"uses,omitempty"`
	NodeName  string     `json:"nodeName,omitempty"`
	CreatedBy string     `json:"createdBy,omitempty"`
	RevokedAt int64      `json:"revokedAt,omitempty"`
	RevokedBy string     `json:"revokedBy,omitempty"`
	// ExpireAudited is set once token.expire has been recorded.
	ExpireAudited bool `json:"expireAudited,omitempty"`
}

// tokenUse is one successful enrolment with a token. SPKI binds the use
// to the CSR's key, so that a retry with the same key can be told from a
// replay with another.
type tokenUse struct {
	NodeID string `json:"nodeId"`
	Serial string `json:"serial"`
	SPKI   string `json:"spki"`
	At     int64  `json:"at"`
	Source string `json:"source,omitempty"`
}

// Token states (TokenInfo.state).
const (
	tokenActive  = "active"
	tokenUsed    = "used"
	tokenExpired = "expired"
	tokenRevoked = "revoked"
)

// state is the token's state at now: revoked, used (no use left), expired,
// or active, in that order.
func (t *tokenRecord) state(now time.Time) string {
	switch {
	case t.RevokedAt != 0:
		return tokenRevoked
	case uint32(len(t.Uses)) >= t.MaxUses:
		return tokenUsed
	case !now.Before(fromMS(t.ExpiresAt)):
		return tokenExpired
	}
	return tokenActive
}

func (t *tokenRecord) useBySPKI(spki string) *tokenUse {
	for i := range t.Uses {
		if t.Uses[i].SPKI == spki {
			return &t.Uses[i]
		}
	}
	return nil
}

func (t *tokenRecord) info(now time.Time) *directorv1.TokenInfo {
	ti := &directorv1.TokenInfo{
		Id:              t.ID,
		State:           t.state(now),
		CreatedAtUnixMs: t.CreatedAt,
		ExpiresAtUnixMs: t.ExpiresAt,
		Uses:            uint32(len(t.Uses)),
		MaxUses:         t.MaxUses,
		NodeName:        t.NodeName,
		CreatedBy:       t.CreatedBy,
	}
	for _, u := range t.Uses {
		ti.UsedByNodes = append(ti.UsedByNodes, u.NodeID)
	}
	return ti
}

// certRecord is certs/<serial>: kept so that a retried enrolment gets the
// very same certificate, and as the record of what was issued.
type certRecord struct {
	V        int    `json:"v"`
	Serial   string `json:"serial"`
	NodeID   string `json:"nodeId"`
	DER      []byte `json:"der"`
	IssuedAt int64  `json:"issuedAt"`
	NotAfter int64  `json:"notAfter"`
	// Kind is enroll or renew.
	Kind string `json:"kind"`
}

// nodeCert is one certificate a node holds or held.
type nodeCert struct {
	Serial   string `json:"serial"`
	NotAfter int64  `json:"notAfter"`
	IssuedAt int64  `json:"issuedAt"`
}

// nodeRecord is nodes/<node>.
type nodeRecord struct {
	V            int          `json:"v"`
	ID           string       `json:"id"`
	Host         hostFacts    `json:"host"`
	Capabilities []capability `json:"capabilities,omitempty"`
	TokenID      string       `json:"tokenId,omitempty"`
	EnrolledAt   int64        `json:"enrolledAt"`
	// Serial is the newest certificate's; Certs are all the node was
	// issued and that have not expired long ago.
	Serial       string     `json:"serial"`
	Certs        []nodeCert `json:"certs"`
	Address      string     `json:"address,omitempty"`
	RevokedAt    int64      `json:"revokedAt,omitempty"`
	RevokeReason string     `json:"revokeReason,omitempty"`
	// TaskKinds are the task kinds the node's agent said it runs at its
	// last Register (none: an agent that predates tasks).
	TaskKinds []string `json:"taskKinds,omitempty"`
}

func (n *nodeRecord) revoked() bool { return n.RevokedAt != 0 }

func (n *nodeRecord) cert(serial string) *nodeCert {
	for i := range n.Certs {
		if n.Certs[i].Serial == serial {
			return &n.Certs[i]
		}
	}
	return nil
}

// addCert records a new certificate as the node's current one and drops
// those that expired more than a day before now.
func (n *nodeRecord) addCert(c nodeCert, now time.Time) {
	keep := n.Certs[:0]
	for _, old := range n.Certs {
		if fromMS(old.NotAfter).Add(24 * time.Hour).After(now) {
			keep = append(keep, old)
		}
	}
	n.Certs = append(keep, c)
	n.Serial = c.Serial
}

// hostFacts mirrors directorv1.HostFacts in the store.
type hostFacts struct {
	HostUUID     string `json:"hostUuid,omitempty"`
	Hostname     string `json:"hostname,omitempty"`
	BootID       string `json:"bootId,omitempty"`
	AgentVersion string `json:"agentVersion,omitempty"`
	OSPretty     string `json:"osPretty,omitempty"`
	Kernel       string `json:"kernel,omitempty"`
	QEMUVersion  string `json:"qemuVersion,omitempty"`
}

func factsFrom(h *directorv1.HostFacts) hostFacts {
	if h == nil {
		return hostFacts{}
	}
	return hostFacts{
		HostUUID: h.GetHostUuid(), Hostname: h.GetHostname(), BootID: h.GetBootId(),
		AgentVersion: h.GetAgentVersion(), OSPretty: h.GetOsPretty(), Kernel: h.GetKernel(),
		QEMUVersion: h.GetQemuVersion(),
	}
}

func (h hostFacts) proto() *directorv1.HostFacts {
	return &directorv1.HostFacts{
		HostUuid: h.HostUUID, Hostname: h.Hostname, BootId: h.BootID, AgentVersion: h.AgentVersion,
		OsPretty: h.OSPretty, Kernel: h.Kernel, QemuVersion: h.QEMUVersion,
	}
}

// capability mirrors directorv1.Capability in the store.
type capability struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail,omitempty"`
}

func capsFrom(cs []*directorv1.Capability) []capability {
	var out []capability
	for _, c := range cs {
		out = append(out, capability{Name: c.GetName(), Available: c.GetAvailable(), Detail: c.GetDetail()})
	}
	return out
}

func capsProto(cs []capability) []*directorv1.Capability {
	var out []*directorv1.Capability
	for _, c := range cs {
		out = append(out, &directorv1.Capability{Name: c.Name, Available: c.Available, Detail: c.Detail})
	}
	return out
}

// revokedRecord is revoked/<serial>.
type revokedRecord struct {
	V      int    `json:"v"`
	Serial string `json:"serial"`
	NodeID string `json:"nodeId"`
	// Reason: revoked (an admin), left (the node), superseded (renewed and
	// the new certificate in use), forgotten.
	Reason string `json:"reason"`
	At     int64  `json:"at"`
}

// nodeStateRecord is nodestate/<node>: the last liveness transition.
type nodeStateRecord struct {
	V        int    `json:"v"`
	State    string `json:"state"`
	Since    int64  `json:"since"`
	LastSeen int64  `json:"lastSeen"`
}

// reportRecord is reports/<node>: the VMs of the node's last report,
// written when the VM set or a phase changed.
type reportRecord struct {
	V   int        `json:"v"`
	At  int64      `json:"at"`
	VMs []vmRecord `json:"vms"`
}

type vmRecord struct {
	UID   string `json:"uid"`
	Name  string `json:"name"`
	Phase string `json:"phase"`
	Class string `json:"class,omitempty"`
}

// auditRecord is audit/<time>-<rand>.
type auditRecord struct {
	V       int    `json:"v"`
	Time    int64  `json:"time"`
	Kind    string `json:"kind"`
	TokenID string `json:"tokenId,omitempty"`
	NodeID  string `json:"nodeId,omitempty"`
	Serial  string `json:"serial,omitempty"`
	Source  string `json:"source,omitempty"`
	Actor   string `json:"actor,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

func (a *auditRecord) proto() *directorv1.AuditEntry {
	return &directorv1.AuditEntry{
		TimeUnixMs: a.Time, Kind: a.Kind, TokenId: a.TokenID, NodeId: a.NodeID,
		Serial: a.Serial, Source: a.Source, Actor: a.Actor, Detail: a.Detail,
	}
}
