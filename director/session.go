package director

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/enroll"
)

// liveSession is one agent's open Session stream.
type liveSession struct {
	node, serial string
	notAfter     time.Time
	addr         string
	opened       time.Time

	once   sync.Once
	ended  chan struct{} // closed by cut
	why    error
	reason string

	// out holds what the director has for the agent (tasks, cancels,
	// resyncs, acks); the session's handler sends it, after Registered.
	out chan *directorv1.SessionResponse
	w   *sessionWriter

	taskMu     sync.Mutex
	sent       map[string]bool // task ids sent on this session
	cancelSent map[string]bool
}

// cut ends the session: with why nil quietly; else the handler returns
// why as Unauthenticated, after a Revoked message (best effort) when the
// certificate was revoked.
func (s *liveSession) cut(why error, reason string) {
	s.once.Do(func() {
		s.why, s.reason = why, reason
		close(s.ended)
	})
}

// nodeReport is a node's last host report, in memory (its VM list also
// in reports/<node> when it changes).
type nodeReport struct {
	at     time.Time
	report *directorv1.HostReport // nil when loaded from the store
	vms    []vmRecord
}

// actor is who asked: a node, or an admin user on the socket.
type actor struct{ name, source string }

type agentService struct{ d *Director }

// Session is the agent's live stream: Register first (its node id must be
// the certificate's), then heartbeats and reports, each heard on the
// director's clock. The stream ends when the agent leaves, the director
// shuts down (Goodbye) or the certificate is revoked or expires
// (Unauthenticated).
func (a *agentService) Session(ctx context.Context, stream *connect.BidiStream[directorv1.SessionRequest, directorv1.SessionResponse]) error {
	d := a.d
	p, ok := peerFrom(ctx)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errNoCert)
	}
	first, err := stream.Receive()
	if err != nil {
		return nil // gone before registering
	}
	reg := first.GetRegister()
	if reg == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first session message must be Register"))
	}
	if reg.GetNodeId() != p.NodeID {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("register: node id %q is not the certificate's %q", reg.GetNodeId(), p.NodeID))
	}
	if err := d.register(ctx, p, reg); err != nil {
		return err
	}

	s := &liveSession{node: p.NodeID, serial: p.Serial, notAfter: p.NotAfter, addr: p.Addr,
		opened: d.now(), ended: make(chan struct{}), out: make(chan *directorv1.SessionResponse, outQueue),
		sent: map[string]bool{}, cancelSent: map[string]bool{}}
	// sessions/<node> names this replica from now on: tasks written
	// through any replica come here, another replica holding the node
	// ends its stream, and only this one judges the node's liveness.
	if err := d.claimSession(ctx, s); err != nil {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	s.w = newSessionWriter(d, s)
	// The writer outlives the handler long enough to store what the agent
	// sent last (a terminal status just before it left).
	handlerDone := make(chan struct{})
	defer close(handlerDone)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		s.w.run(handlerDone)
	}()
	d.mu.Lock()
	old := d.sessions[p.NodeID]
	d.sessions[p.NodeID] = s
	_, revoked := d.revoked[p.Serial]
	if _, ok := d.revokedNodes[p.NodeID]; ok {
		revoked = true
	}
	d.mu.Unlock()
	if old != nil {
		// The agent reconnected (its old connection is half-open or
		// gone): the new stream is the session.
		old.cut(nil, "replaced by a new session")
	}
	if revoked { // revoked between the check and the registry
		s.cut(errCertRevoked, "revoked")
	}
	defer func() {
		d.mu.Lock()
		if d.sessions[p.NodeID] == s {
			delete(d.sessions, p.NodeID)
		}
		d.mu.Unlock()
		d.releaseSession(s)
	}()
	if tr := d.live.seen(p.NodeID); tr != nil {
		d.recordTransition(ctx, *tr)
	}
	d.audit(ctx, auditRecord{Kind: "session.open", NodeID: p.NodeID, Serial: p.Serial, Source: p.Addr, Actor: p.NodeID})
	d.log.Info("session open", "node", p.NodeID, "serial", p.Serial, "peer", p.Addr)

	if err := stream.Send(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Registered{Registered: &directorv1.Registered{
		NodeId:              p.NodeID,
		HeartbeatIntervalMs: d.opts.HeartbeatInterval.Milliseconds(),
		ReportIntervalMs:    d.opts.ReportInterval.Milliseconds(),
		DirectorVersion:     d.version,
		ReplicaId:           d.replicaID,
		Directors:           d.directorAddrs(),
	}}}); err != nil {
		d.closeSession(p, "send failed")
		return nil
	}

	// The receiving goroutine answers heartbeats itself (one goroutine
	// hand-off less per message: a fifth of the director's CPU at 1000
	// heartbeats/s went to waking a second goroutine); this one waits for
	// the session's end. Sends are serialised, and none is made once the
	// handler has returned.
	var (
		sendMu   sync.Mutex
		returned bool
	)
	send := func(m *directorv1.SessionResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		if returned {
			return errSessionOver
		}
		return stream.Send(m)
	}
	defer func() {
		sendMu.Lock()
		returned = true
		sendMu.Unlock()
	}()
	type recvEnd struct {
		why string
		ret error // the handler's error (nil: the stream just ends)
	}
	// Every session starts with a full inventory (the one "on Register")
	// and with the node's tasks still to run.
	d.resync(s, "", ResyncRegister)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.sendPending(ctx, s)
	}()
	recvDone := make(chan recvEnd, 1)
	go func() {
		for {
			m, err := stream.Receive()
			if err != nil {
				recvDone <- recvEnd{why: "stream ended"}
				return
			}
			select {
			case <-s.ended:
				return // the handler answers the cut
			default:
			}
			if tr := d.live.seen(p.NodeID); tr != nil {
				d.recordTransition(ctx, *tr)
			}
			switch msg := m.GetMsg().(type) {
			case *directorv1.SessionRequest_Heartbeat:
				if err := send(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_HeartbeatAck{
					HeartbeatAck: &directorv1.HeartbeatAck{Seq: msg.Heartbeat.GetSeq()}}}); err != nil {
					recvDone <- recvEnd{why: "send failed"}
					return
				}
			case *directorv1.SessionRequest_HostReport:
				d.report(ctx, p.NodeID, msg.HostReport)
			case *directorv1.SessionRequest_TaskStatus:
				s.w.status(msg.TaskStatus)
			case *directorv1.SessionRequest_TaskData:
				s.w.taskData(msg.TaskData)
			case *directorv1.SessionRequest_Inventory:
				d.fullInventory(s, msg.Inventory)
			case *directorv1.SessionRequest_InventoryDelta:
				d.inventoryDelta(s, msg.InventoryDelta)
			case *directorv1.SessionRequest_Goodbye:
				// Leaving on purpose is no sign of life or death: the
				// liveness clock runs on.
				recvDone <- recvEnd{why: "agent: " + msg.Goodbye.GetReason()}
				return
			case *directorv1.SessionRequest_Register:
				recvDone <- recvEnd{why: "second register", ret: connect.NewError(connect.CodeInvalidArgument,
					errors.New("register: the session is registered already"))}
				return
			}
		}
	}()

	for {
		select {
		case m := <-s.out:
			if err := send(m); err != nil {
				d.closeSession(p, "send failed")
				return nil
			}
			continue
		case <-s.ended:
		case <-d.stopping:
		case <-ctx.Done():
		case e := <-recvDone:
			d.closeSession(p, e.why)
			return e.ret
		}
		break
	}
	select {
	case <-s.ended:
		if s.why == nil {
			d.closeSession(p, s.reason)
			return nil
		}
		if errors.Is(s.why, errCertRevoked) {
			_ = send(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Revoked{Revoked: &directorv1.Revoked{Reason: s.reason}}})
		}
		d.closeSession(p, s.reason)
		return connect.NewError(connect.CodeUnauthenticated, s.why)
	case <-d.stopping:
		// With another replica live the agent goes there at once;
		// alone, this one is back in a while (a restart).
		after := int64(1000)
		if d.otherReplicas() {
			after = 0
		}
		_ = send(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Goodbye{Goodbye: &directorv1.Goodbye{
			Reason: "director shutting down", ReconnectAfterMs: after}}})
		d.closeSession(p, "director shutting down")
		return nil
	case <-ctx.Done():
		d.closeSession(p, "connection lost")
		return nil
	case e := <-recvDone:
		d.closeSession(p, e.why)
		return e.ret
	}
}

// errSessionOver is a send after the session's handler returned.
var errSessionOver = errors.New("session over")

func (d *Director) closeSession(p peer, why string) {
	d.log.Info("session closed", "node", p.NodeID, "why", why)
	// The stream's ctx may be done: the audit uses the director's own.
	d.audit(d.bg, auditRecord{Kind: "session.close", NodeID: p.NodeID, Serial: p.Serial, Source: p.Addr,
		Actor: p.NodeID, Detail: why})
}

// register updates the node's record from Register (facts, capabilities,
// address) and, when the session uses the node's newest certificate,
// revokes the older ones as superseded: a renewed node no longer needs
// them once it is back with the new one.
func (d *Director) register(ctx context.Context, p peer, reg *directorv1.Register) error {
	for attempt := 0; attempt < 5; attempt++ {
		n, rev, err := d.getNode(ctx, p.NodeID)
		if notFound(err) {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("node %s is not enrolled here (forgotten?)", p.NodeID))
		}
		if err != nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("read node %s: %w", p.NodeID, err))
		}
		if n.revoked() {
			return connect.NewError(connect.CodeUnauthenticated, errCertRevoked)
		}
		now := d.now()
		changed := false
		if reg.GetHost() != nil {
			if f := factsFrom(reg.GetHost()); f != n.Host {
				n.Host, changed = f, true
			}
		}
		if caps := capsFrom(reg.GetCapabilities()); !slices.Equal(caps, n.Capabilities) {
			n.Capabilities, changed = caps, true
		}
		if kinds := taskKindsFrom(reg.GetTaskKinds()); !slices.Equal(kinds, n.TaskKinds) {
			n.TaskKinds, changed = kinds, true
		}
		if a := hostOf(p.Addr); a != n.Address {
			n.Address, changed = a, true // the host only: a port changes every connection
		}
		txn := d.txn()
		txn.IfRev(preNodes+p.NodeID, rev)
		var superseded []revokedRecord
		if p.Serial == n.Serial {
			for _, c := range n.Certs {
				if c.Serial == p.Serial || d.isRevoked(c.Serial) || now.After(fromMS(c.NotAfter)) {
					continue
				}
				r := revokedRecord{V: recordVersion, Serial: c.Serial, NodeID: p.NodeID, Reason: "superseded", At: ms(now)}
				superseded = append(superseded, r)
				txn.Put(preRevoked+c.Serial, r, keepFor(now, fromMS(c.NotAfter).Add(24*time.Hour)))
				txn.audit(now, auditRecord{Kind: "cert.revoke", NodeID: p.NodeID, Serial: c.Serial,
					Source: p.Addr, Actor: p.NodeID, Detail: "superseded by " + p.Serial})
			}
		}
		if !changed && len(superseded) == 0 {
			return nil
		}
		txn.Put(preNodes+p.NodeID, n, 0)
		ok, err := txn.commit(ctx)
		if err != nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("update node %s: %w", p.NodeID, err))
		}
		if ok {
			for _, r := range superseded {
				d.applyRevoked(r)
			}
			return nil
		}
	}
	return connect.NewError(connect.CodeAborted, fmt.Errorf("node %s: record kept changing", p.NodeID))
}

// report keeps the node's last host report in memory and writes its VM
// list to reports/<node> when the set of VMs or a phase changed.
func (d *Director) report(ctx context.Context, node string, r *directorv1.HostReport) {
	now := d.now()
	vms := make([]vmRecord, 0, len(r.GetVms()))
	for _, v := range r.GetVms() {
		vms = append(vms, vmRecord{UID: v.GetUid(), Name: v.GetName(), Phase: v.GetPhase(), Class: v.GetClass()})
	}
	slices.SortFunc(vms, func(a, b vmRecord) int {
		if a.UID < b.UID {
			return -1
		}
		if a.UID > b.UID {
			return 1
		}
		return 0
	})
	d.mu.Lock()
	prev := d.reports[node]
	d.reports[node] = &nodeReport{at: now, report: r, vms: vms}
	d.mu.Unlock()
	if prev != nil && slices.Equal(prev.vms, vms) || d.hasInventory(node) {
		return // unchanged, or superseded by the node's inventory
	}
	if err := d.store.Put(ctx, preReports+node, reportRecord{V: recordVersion, At: ms(now), VMs: vms}, 0); err != nil {
		d.log.Warn("director: write report", "node", node, "err", err)
	}
}

// RenewCertificate signs a new key's CSR for the calling node. The
// caller's certificate stays valid until a session registers with the new
// one; every other certificate of the node is superseded at once.
func (a *agentService) RenewCertificate(ctx context.Context, req *connect.Request[directorv1.RenewCertificateRequest]) (*connect.Response[directorv1.RenewCertificateResponse], error) {
	d := a.d
	p, ok := peerFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errNoCert)
	}
	csr, err := enroll.ParseCSR(req.Msg.GetCsrDer())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if !d.ca.CanSign() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this director cannot sign certificates (no CA key)"))
	}
	for attempt := 0; attempt < 5; attempt++ {
		n, rev, err := d.getNode(ctx, p.NodeID)
		if notFound(err) {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("node %s is not enrolled here", p.NodeID))
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read node %s: %w", p.NodeID, err))
		}
		if n.revoked() {
			return nil, connect.NewError(connect.CodeUnauthenticated, errCertRevoked)
		}
		now := d.now()
		der, serial, notAfter, err := d.ca.SignNode(csr, p.NodeID, now, d.opts.CertLifetime)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sign certificate for node %s", p.NodeID))
		}
		n.addCert(nodeCert{Serial: serial, NotAfter: ms(notAfter), IssuedAt: ms(now)}, now)
		txn := d.txn()
		txn.IfRev(preNodes+p.NodeID, rev).
			Put(preNodes+p.NodeID, n, 0).
			Put(preCerts+serial, certRecord{V: recordVersion, Serial: serial, NodeID: p.NodeID, DER: der,
				IssuedAt: ms(now), NotAfter: ms(notAfter), Kind: "renew"}, keepFor(now, notAfter.Add(24*time.Hour)))
		txn.audit(now, auditRecord{Kind: "cert.renew", NodeID: p.NodeID, Serial: serial, Source: p.Addr,
			Actor: p.NodeID, Detail: "replaces " + p.Serial})
		// A node holds at most two valid certificates: the caller's (the
		// agent still needs it if this answer is lost) and the new one.
		// Any other, an earlier renewal's answer never used, is
		// superseded now: renewing without limit would otherwise pile up
		// valid certificates, more than one transaction can revoke.
		var superseded []revokedRecord
		for _, c := range n.Certs {
			if c.Serial == p.Serial || c.Serial == serial || d.isRevoked(c.Serial) || now.After(fromMS(c.NotAfter)) {
				continue
			}
			r := revokedRecord{V: recordVersion, Serial: c.Serial, NodeID: p.NodeID, Reason: "superseded", At: ms(now)}
			superseded = append(superseded, r)
			txn.Put(preRevoked+c.Serial, r, keepFor(now, fromMS(c.NotAfter).Add(24*time.Hour)))
			txn.audit(now, auditRecord{Kind: "cert.revoke", NodeID: p.NodeID, Serial: c.Serial,
				Source: p.Addr, Actor: p.NodeID, Detail: "superseded by " + serial})
		}
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("store certificate for node %s: %w", p.NodeID, err))
		}
		if !ok {
			continue
		}
		for _, r := range superseded {
			d.applyRevoked(r)
		}
		d.log.Info("certificate renewed", "node", p.NodeID, "serial", serial, "old", p.Serial,
			"notAfter", notAfter.UTC().Format(time.RFC3339))
		return connect.NewResponse(&directorv1.RenewCertificateResponse{
			CertDer: der, CaChainDer: d.ca.Chain(), CertNotAfterUnixMs: ms(notAfter),
		}), nil
	}
	return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("node %s: record kept changing", p.NodeID))
}

// Leave revokes the calling node's certificates (reason "left"); its
// session ends. The host's VMs are untouched.
func (a *agentService) Leave(ctx context.Context, req *connect.Request[directorv1.LeaveRequest]) (*connect.Response[directorv1.LeaveResponse], error) {
	p, ok := peerFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errNoCert)
	}
	detail := "left"
	if r := req.Msg.GetReason(); r != "" {
		detail = "left: " + truncate(r, 200)
	}
	if _, err := a.d.revokeNode(ctx, p.NodeID, "left", detail, "node.leave", actor{name: p.NodeID, source: p.Addr}); err != nil {
		if notFound(err) {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("node %s is not enrolled here", p.NodeID))
		}
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&directorv1.LeaveResponse{}), nil
}

// taskKindsFrom is the kinds an agent advertised, as stored: at most 32,
// each a kind name's characters only, sorted, no duplicates.
func taskKindsFrom(kinds []string) []string {
	var out []string
	for _, k := range kinds {
		if len(out) == 32 {
			break
		}
		if k == "" || len(k) > 40 || strings.ContainsFunc(k, func(r rune) bool { return (r < 'a' || r > 'z') && r != '-' }) {
			continue
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// hostOf is the host of a host:port address (the address itself when it
// has no port).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xc0) == 0x80 {
		n--
	}
	return s[:n]
}
