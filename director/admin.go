package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/enroll"
)

// Token limits of CreateToken.
const (
	DefaultTokenTTL = time.Hour
	MinTokenTTL     = time.Minute
	MaxTokenTTL     = 24 * time.Hour
	MaxTokenUses    = 1000
)

// adminTempName is where the admin socket is made before it is renamed
// into place (no longer than etcd.sock: the data dir's path length is
// checked against that).
const adminTempName = "admin.new"

// listenAdmin makes the admin socket, 0600. It is made under a temporary
// name in the data dir (0700: nobody else can reach it there), chmod'ed,
// then renamed into place, so it never exists at its path with looser
// modes; no umask is set (process-wide, while the embedded etcd runs). A
// stale socket from a killed director is replaced: the data dir lock says
// none runs.
func listenAdmin(path string) (_ net.Listener, err error) {
	tmp := filepath.Join(filepath.Dir(path), adminTempName)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("director: admin socket %s: %w", tmp, err)
	}
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("director: admin socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	defer func() {
		if err != nil {
			ln.Close()
			os.Remove(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o600); err != nil {
		return nil, fmt.Errorf("director: admin socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("director: admin socket: %w", err)
	}
	return ln, nil
}

// credKey carries the admin caller's credentials in a request context.
type credKey struct{}

type cred struct {
	uid, pid int
	ok       bool
}

// newAdminServer serves AdminService over HTTP/1.1 on the admin socket;
// every request's peer credentials (SO_PEERCRED) must be root's or the
// director's own user's.
func (d *Director) newAdminServer() *http.Server {
	// a task's body (MaxTaskBody) and the rest of its request fit
	opts := append(d.handlerOptions(), connect.WithReadMaxBytes(MaxTaskBody+64<<10))
	ew := connect.NewErrorWriter(opts...)
	mux := http.NewServeMux()
	path, h := directorv1connect.NewAdminServiceHandler(&adminService{d: d}, opts...)
	mux.Handle(path, h)
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(credKey{}).(cred)
		if err := checkAdminPeer(c, d.euid); err != nil {
			d.audit(r.Context(), auditRecord{Kind: "admin.deny", Source: adminSource(c), Actor: userName(c.uid),
				Detail: r.URL.Path})
			ew.Write(w, r, connect.NewError(connect.CodePermissionDenied, err))
			return
		}
		mux.ServeHTTP(w, r)
	})
	return &http.Server{
		Handler:           guard,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          nil,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, credKey{}, peerCred(c))
		},
	}
}

// peerCred reads the connecting process's credentials from the socket.
func peerCred(c net.Conn) cred {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return cred{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return cred{}
	}
	var out cred
	_ = raw.Control(func(fd uintptr) {
		u, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			out = cred{uid: int(u.Uid), pid: int(u.Pid), ok: true}
		}
	})
	return out
}

// checkAdminPeer lets root and the director's own user in.
func checkAdminPeer(c cred, euid int) error {
	if !c.ok {
		return errors.New("admin socket: cannot tell who is calling")
	}
	if c.uid != 0 && c.uid != euid {
		return fmt.Errorf("admin socket: uid %d may not administer the director (root or uid %d only)", c.uid, euid)
	}
	return nil
}

func adminSource(c cred) string {
	if !c.ok {
		return "unix"
	}
	return fmt.Sprintf("unix:pid=%d,uid=%d", c.pid, c.uid)
}

// userName is uid's login name, or "uid:N".
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid:" + strconv.Itoa(uid)
}

func adminActor(ctx context.Context) actor {
	c, _ := ctx.Value(credKey{}).(cred)
	return actor{name: userName(c.uid), source: adminSource(c)}
}

type adminService struct {
	// the task, inventory and replica calls not built yet answer
	// Unimplemented
	directorv1connect.UnimplementedAdminServiceHandler
	d *Director
}

// CreateToken makes a join token: its secret exists in clear only in the
// answer's join string; the store keeps its SHA-256.
func (a *adminService) CreateToken(ctx context.Context, req *connect.Request[directorv1.CreateTokenRequest]) (*connect.Response[directorv1.CreateTokenResponse], error) {
	d := a.d
	m := req.Msg
	ttl := time.Duration(m.GetTtlMs()) * time.Millisecond
	switch {
	case m.GetTtlMs() == 0:
		ttl = DefaultTokenTTL
	case ttl < MinTokenTTL || ttl > MaxTokenTTL:
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("ttl %s: want %s to %s", ttl, MinTokenTTL, MaxTokenTTL))
	}
	uses := m.GetMaxUses()
	switch {
	case uses == 0:
		uses = 1
	case uses > MaxTokenUses:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("max uses %d: want 1 to %d", uses, MaxTokenUses))
	}
	nodeName := strings.TrimSpace(m.GetNodeName())
	if nodeName != "" && !ValidNodeName(nodeName) {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("node name %q: want a hostname (letters, digits, '-' and '.')", truncate(nodeName, 253)))
	}
	addr := m.GetAddress()
	if addr == "" {
		addr = d.advertise
	}
	who := adminActor(ctx)
	for attempt := 0; attempt < 3; attempt++ {
		id, secret, err := enroll.NewToken()
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		join, err := enroll.NewJoin(id, secret, addr, d.ca.Pin())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		now := d.now()
		tok := &tokenRecord{
			V: recordVersion, ID: id, Hash: enroll.HashSecret(secret), CreatedAt: ms(now),
			ExpiresAt: ms(now.Add(ttl)), MaxUses: uses, NodeName: nodeName, CreatedBy: who.name,
		}
		txn := d.txn()
		txn.IfAbsent(preTokens+id).Put(preTokens+id, tok, tokenTTL(now, tok))
		detail := fmt.Sprintf("ttl %s, uses %d", ttl, uses)
		if nodeName != "" {
			detail += ", node " + nodeName
		}
		txn.audit(now, auditRecord{Kind: "token.create", TokenID: id, Source: who.source, Actor: who.name, Detail: detail})
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("store token: %w", err))
		}
		if !ok {
			continue // an id drawn twice: draw again
		}
		return connect.NewResponse(&directorv1.CreateTokenResponse{
			Id: id, JoinString: join.Format(), ExpiresAtUnixMs: tok.ExpiresAt,
		}), nil
	}
	return nil, connect.NewError(connect.CodeInternal, errors.New("token ids collided three times"))
}

// ValidNodeName is the rule for a token's --node-name: an RFC 1123 host
// name (labels of letters, digits and inner hyphens, 1-63 characters, 253
// in all). The CLI checks it before it calls.
func ValidNodeName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}

// ListTokens lists the tokens with their state at the director's clock.
// An expired token seen here for the first time is audited token.expire.
func (a *adminService) ListTokens(ctx context.Context, _ *connect.Request[directorv1.ListTokensRequest]) (*connect.Response[directorv1.ListTokensResponse], error) {
	d := a.d
	type item struct {
		tok tokenRecord
		rev int64
	}
	var items []item
	err := d.store.List(ctx, preTokens, func(key string, rev int64, raw []byte) error {
		var t tokenRecord
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("token record %s: %w", key, err)
		}
		items = append(items, item{t, rev})
		return nil
	})
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	now := d.now()
	who := adminActor(ctx)
	resp := &directorv1.ListTokensResponse{}
	for i := range items {
		t := &items[i].tok
		if t.state(now) == tokenExpired {
			d.expired(ctx, t, items[i].rev, who.source)
		}
		resp.Tokens = append(resp.Tokens, t.info(now))
	}
	sort.SliceStable(resp.Tokens, func(i, j int) bool { return resp.Tokens[i].CreatedAtUnixMs < resp.Tokens[j].CreatedAtUnixMs })
	return connect.NewResponse(resp), nil
}

// RevokeToken stops a token's further use. Nodes enrolled with it keep
// their certificates.
func (a *adminService) RevokeToken(ctx context.Context, req *connect.Request[directorv1.RevokeTokenRequest]) (*connect.Response[directorv1.RevokeTokenResponse], error) {
	d := a.d
	id := req.Msg.GetId()
	if len(id) != enroll.IDLen {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("token id: want %d characters", enroll.IDLen))
	}
	who := adminActor(ctx)
	for attempt := 0; attempt < 5; attempt++ {
		var t tokenRecord
		rev, err := d.store.Get(ctx, preTokens+id, &t)
		if notFound(err) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("token %s: no such token", id))
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		now := d.now()
		if t.RevokedAt != 0 {
			return connect.NewResponse(&directorv1.RevokeTokenResponse{Token: t.info(now)}), nil
		}
		t.RevokedAt, t.RevokedBy = ms(now), who.name
		txn := d.txn()
		txn.IfRev(preTokens+id, rev).Put(preTokens+id, &t, tokenTTL(now, &t))
		txn.audit(now, auditRecord{Kind: "token.revoke", TokenID: id, Source: who.source, Actor: who.name})
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		if ok {
			return connect.NewResponse(&directorv1.RevokeTokenResponse{Token: t.info(now)}), nil
		}
	}
	return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("token %s kept changing", id))
}

// nodeInfo is a node's record with its liveness on this director.
func (d *Director) nodeInfo(n *nodeRecord) *directorv1.NodeInfo {
	ni := &directorv1.NodeInfo{
		Id: n.ID, HostUuid: n.Host.HostUUID, Hostname: n.Host.Hostname, CertSerial: n.Serial,
		AgentVersion: n.Host.AgentVersion, Address: n.Address, EnrolledAtUnixMs: n.EnrolledAt,
		RevokedAtUnixMs: n.RevokedAt, RevokeReason: n.RevokeReason,
	}
	if c := n.cert(n.Serial); c != nil {
		ni.CertNotAfterUnixMs = c.NotAfter
	}
	l, tracked := d.live.get(n.ID)
	ni.LastSeenUnixMs = ms(l.LastSeen)
	switch {
	case n.revoked():
		ni.State, ni.StateSinceUnixMs = StateRevoked, n.RevokedAt
	case tracked:
		ni.State, ni.StateSinceUnixMs = l.State, ms(l.Since)
	default:
		ni.State = StateOffline
	}
	d.mu.Lock()
	_, ni.Connected = d.sessions[n.ID]
	d.mu.Unlock()
	if ni.Connected {
		ni.ReplicaId = d.replicaID
	} else if r := d.remoteHolder(n.ID); r != "" && !n.revoked() {
		// Held by another replica, which judges it: connected there,
		// in the state it wrote.
		st := d.remoteState(n.ID)
		ni.Connected, ni.ReplicaId = true, r
		ni.State, ni.StateSinceUnixMs = st.State, st.Since
		if st.LastSeen > ni.LastSeenUnixMs {
			ni.LastSeenUnixMs = st.LastSeen
		}
	}
	ni.TaskKinds = n.TaskKinds
	return ni
}

func (d *Director) listNodes(ctx context.Context) ([]*nodeRecord, error) {
	var out []*nodeRecord
	err := d.store.List(ctx, preNodes, func(key string, _ int64, raw []byte) error {
		var n nodeRecord
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("node record %s: %w", key, err)
		}
		out = append(out, &n)
		return nil
	})
	return out, err
}

// ListNodes lists the enrolled nodes, in hostname order.
func (a *adminService) ListNodes(ctx context.Context, _ *connect.Request[directorv1.ListNodesRequest]) (*connect.Response[directorv1.ListNodesResponse], error) {
	nodes, err := a.d.listNodes(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	resp := &directorv1.ListNodesResponse{}
	for _, n := range nodes {
		resp.Nodes = append(resp.Nodes, a.d.nodeInfo(n))
	}
	sort.SliceStable(resp.Nodes, func(i, j int) bool {
		if resp.Nodes[i].Hostname != resp.Nodes[j].Hostname {
			return resp.Nodes[i].Hostname < resp.Nodes[j].Hostname
		}
		return resp.Nodes[i].EnrolledAtUnixMs < resp.Nodes[j].EnrolledAtUnixMs
	})
	return connect.NewResponse(resp), nil
}

// findNode is the node named by id: a node id, or a hostname that names
// one node (one not revoked, if others are).
func (d *Director) findNode(ctx context.Context, id string) (*nodeRecord, error) {
	if id == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no node id or hostname"))
	}
	if enroll.ValidNodeID(id) {
		n, _, err := d.getNode(ctx, id)
		if err == nil {
			return n, nil
		}
		if !notFound(err) {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
	}
	nodes, err := d.listNodes(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	var all, live []*nodeRecord
	for _, n := range nodes {
		if strings.EqualFold(n.Host.Hostname, id) {
			all = append(all, n)
			if !n.revoked() {
				live = append(live, n)
			}
		}
	}
	if len(all) == 0 && len(id) >= 4 {
		// a unique prefix of a node id
		for _, n := range nodes {
			if strings.HasPrefix(n.ID, id) {
				all = append(all, n)
			}
		}
		if len(all) > 1 {
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("node id prefix %q names %d nodes: give more of the id", truncate(id, 253), len(all)))
		}
	}
	switch {
	case len(all) == 1:
		return all[0], nil
	case len(live) == 1:
		return live[0], nil
	case len(all) == 0:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("node %q: no node has this id, id prefix or hostname", truncate(id, 253)))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("hostname %q names %d nodes: give a node id", truncate(id, 253), len(all)))
}

// GetNode is one node with its capabilities, last report and VMs. While
// the node is not Ready, or not heard from since this director started,
// its VMs' display phase is "unknown (last seen <phase> at <time>)":
// silence is no proof a VM stopped.
func (a *adminService) GetNode(ctx context.Context, req *connect.Request[directorv1.GetNodeRequest]) (*connect.Response[directorv1.GetNodeResponse], error) {
	d := a.d
	n, err := d.findNode(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	ni := d.nodeInfo(n)
	resp := &directorv1.GetNodeResponse{Node: ni, Host: n.Host.proto(), Capabilities: capsProto(n.Capabilities)}
	d.mu.Lock()
	rep := d.reports[n.ID]
	d.mu.Unlock()
	inv, err := d.getInventory(ctx, n.ID)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if rep != nil {
		resp.LastReport = rep.report
		resp.LastReportUnixMs = ms(rep.at)
	}
	resp.Vms = nodeVMs(ni, inv, rep)
	return connect.NewResponse(resp), nil
}

// UnknownPhase is how a VM of a silent node shows: never as stopped.
func UnknownPhase(lastPhase string, at time.Time) string {
	if lastPhase == "" {
		lastPhase = "unknown"
	}
	return fmt.Sprintf("unknown (last seen %s at %s)", lastPhase, at.UTC().Format(time.RFC3339))
}

// RevokeNode revokes the node's certificates; its session ends at once.
func (a *adminService) RevokeNode(ctx context.Context, req *connect.Request[directorv1.RevokeNodeRequest]) (*connect.Response[directorv1.RevokeNodeResponse], error) {
	d := a.d
	n, err := d.findNode(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	// the admin's words are the reason the node record, node show, the
	// audit and the agent's alert give
	reason := "revoked by an admin"
	if r := strings.TrimSpace(req.Msg.GetReason()); r != "" {
		reason = truncate(r, 200)
	}
	n, err = d.revokeNode(ctx, n.ID, reason, reason, "node.revoke", adminActor(ctx))
	if err != nil {
		if notFound(err) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("node %s: gone", req.Msg.GetId()))
		}
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&directorv1.RevokeNodeResponse{Node: d.nodeInfo(n)}), nil
}

// ForgetNode deletes a Revoked or Offline node's records (an Offline one
// is revoked first, so its certificate cannot come back).
func (a *adminService) ForgetNode(ctx context.Context, req *connect.Request[directorv1.ForgetNodeRequest]) (*connect.Response[directorv1.ForgetNodeResponse], error) {
	d := a.d
	n, err := d.findNode(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	ni := d.nodeInfo(n)
	if ni.State != StateRevoked && ni.State != StateOffline {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("node %s (%s) is %s: revoke it first, or wait until it is Offline", n.ID, n.Host.Hostname, ni.State))
	}
	who := adminActor(ctx)
	// Revoked first (a revoked node: the serials a failed write left out),
	// so that no certificate of it can come back.
	if _, err := d.revokeNode(ctx, n.ID, "forgotten", "forgotten while offline", "node.revoke", who); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	now := d.now()
	txn := d.txn()
	txn.Delete(preNodes + n.ID).Delete(preNodeState + n.ID).Delete(preReports + n.ID).Delete(preInventory + n.ID)
	txn.audit(now, auditRecord{Kind: "node.forget", NodeID: n.ID, Source: who.source, Actor: who.name,
		Detail: "hostname " + n.Host.Hostname})
	if _, err := txn.commit(ctx); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	d.live.remove(n.ID)
	d.mu.Lock()
	delete(d.reports, n.ID)
	d.mu.Unlock()
	return connect.NewResponse(&directorv1.ForgetNodeResponse{}), nil
}

// ListAudit lists entries from since (0: all kept), the newest limit of
// them (default 1000), oldest first.
func (a *adminService) ListAudit(ctx context.Context, req *connect.Request[directorv1.ListAuditRequest]) (*connect.Response[directorv1.ListAuditResponse], error) {
	limit := int(req.Msg.GetLimit())
	if limit == 0 {
		limit = 1000
	}
	since := req.Msg.GetSinceUnixMs()
	from := preAudit
	var entries []*directorv1.AuditEntry
	err := a.d.store.List(ctx, from, func(key string, _ int64, raw []byte) error {
		var e auditRecord
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil // one unreadable entry hides no other
		}
		if e.Time < since {
			return nil
		}
		entries = append(entries, e.proto())
		if len(entries) > limit {
			entries = entries[1:]
		}
		return nil
	})
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&directorv1.ListAuditResponse{Entries: entries}), nil
}

// FollowAudit streams entries as they are written, until the caller
// leaves or the director stops.
func (a *adminService) FollowAudit(ctx context.Context, _ *connect.Request[directorv1.FollowAuditRequest], stream *connect.ServerStream[directorv1.AuditEntry]) error {
	d := a.d
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	// From the revision now: every entry written after this call began
	// arrives. The headers go out once that revision is known, so a
	// caller that waited for them misses nothing later.
	resp, err := d.store.Client().Get(ctx, d.store.Prefix()+preAudit, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("follow audit: %w", err))
	}
	if err := stream.Send(nil); err != nil {
		return nil
	}
	for ev := range d.store.Watch(ctx, preAudit, resp.Header.Revision+1) {
		if ev.Status() || ev.Deleted {
			continue
		}
		var e auditRecord
		if err := json.Unmarshal(ev.Raw, &e); err != nil {
			continue
		}
		if err := stream.Send(e.proto()); err != nil {
			return nil
		}
	}
	return nil
}
