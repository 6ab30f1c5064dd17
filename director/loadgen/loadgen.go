package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/enroll"
)

// Identity is one simulated agent's credential.
type Identity struct {
	NodeID string
	Cert   tls.Certificate
	// Roots holds the director's root CA, as the agent keeps it.
	Roots *x509.CertPool
}

// transport is one agent's own connection pool: an HTTP/2-only client
// over TLS 1.3, so every agent has its own TLS connection.
func transport(cfg *tls.Config) *http.Transport {
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Transport{
		TLSClientConfig:   cfg,
		Protocols:         &p,
		ForceAttemptHTTP2: true,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 20 * time.Second, PingTimeout: 10 * time.Second},
	}
}

func baseURL(addr string) string { return "https://" + addr }

// Enrol enrols one agent per join string, inFlight at a time, and
// returns their identities in the same order. It stops at the first
// failure.
func Enrol(ctx context.Context, joins []enroll.Join, inFlight int) ([]Identity, error) {
	if inFlight < 1 {
		inFlight = 1
	}
	ids := make([]Identity, len(joins))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i, j := range joins {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			id, err := enrolOne(ctx, j, fmt.Sprintf("loadgen-%05d", i))
			if err != nil {
				cancel(fmt.Errorf("agent %d: %w", i, err))
				return
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return ids, nil
}

func enrolOne(ctx context.Context, j enroll.Join, hostname string) (Identity, error) {
	key, err := enroll.NewKey()
	if err != nil {
		return Identity{}, err
	}
	csr, err := enroll.NewCSR(key, hostname)
	if err != nil {
		return Identity{}, err
	}
	tr := transport(&tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // verified by the pin, below
		VerifyConnection:   enroll.VerifyPinned(j.Pin(), j.Host()),
	})
	defer tr.CloseIdleConnections()
	c := directorv1connect.NewEnrollServiceClient(&http.Client{Transport: tr}, baseURL(j.Addr()))
	resp, err := c.Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{
		Token:  j.Token(),
		CsrDer: csr,
		Host:   &directorv1.HostFacts{Hostname: hostname, HostUuid: "", AgentVersion: "loadgen"},
	}))
	if err != nil {
		return Identity{}, err
	}
	m := resp.Msg
	roots := x509.NewCertPool()
	chain := [][]byte{m.CertDer}
	for i, der := range m.CaChainDer {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return Identity{}, fmt.Errorf("ca chain %d: %w", i, err)
		}
		if i == len(m.CaChainDer)-1 {
			roots.AddCert(c)
		} else {
			chain = append(chain, der)
		}
	}
	leaf, err := x509.ParseCertificate(m.CertDer)
	if err != nil {
		return Identity{}, err
	}
	return Identity{NodeID: m.NodeId, Cert: tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, Roots: roots}, nil
}

// Stats count what the simulated sessions did.
type Stats struct {
	Registered atomic.Int64 // sessions that got Registered
	Acks       atomic.Int64 // heartbeats answered
	Errors     atomic.Int64 // sessions that ended with an error (and were reopened)
	Tasks      atomic.Int64 // tasks run (each id once)
	Duplicates atomic.Int64 // tasks delivered again (answered from the journal)
	Resyncs    atomic.Int64 // full inventories sent
}

// Options shape the simulated sessions.
type Options struct {
	// Period is the heartbeat period (±10 % jitter; first beats spread
	// over one period).
	Period time.Duration
	// TaskKinds are advertised at Register; with any, each Task is
	// answered Queued then, after TaskDelay, Succeeded (an id seen before
	// only gets its last status again, as a real agent's journal does).
	TaskKinds []string
	TaskDelay time.Duration
	// VMs is the size of the synthetic inventory sent for each Resync.
	VMs int
	// Addrs, when set, are several director replicas: agent i opens its
	// first session to Addrs[i%len(Addrs)] and, after a session ends,
	// waits about a second (0.8 to 1.2 s, the real agent's minimum
	// backoff) and dials the next one, as the agent rotates through the
	// directors it was given. The addr argument is then ignored.
	Addrs []string
	// OnRegistered, when set, is called (from the agent's goroutine) each
	// time agent i (its index in ids) gets Registered, with the replica id
	// the director gave.
	OnRegistered func(i int, replicaID string)
}

// Sessions holds one Session stream per identity against the director at
// addr (host:port, the server name being host), each heartbeating every
// period with ±10 % jitter, first beats spread over one period, until ctx
// ends. A stream that fails is reopened after a second.
func Sessions(ctx context.Context, addr, serverName string, ids []Identity, period time.Duration, st *Stats) {
	SessionsWith(ctx, addr, serverName, ids, Options{Period: period}, st)
}

// SessionsWith is Sessions with tasks and inventory as opts say.
func SessionsWith(ctx context.Context, addr, serverName string, ids []Identity, opts Options, st *Stats) {
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		journal := &taskJournal{m: map[string]*directorv1.TaskStatus{}} // across this agent's sessions
		go func() {
			defer wg.Done()
			for k := i; ctx.Err() == nil; k++ {
				to, wait := addr, time.Second
				if len(opts.Addrs) > 0 {
					to = opts.Addrs[k%len(opts.Addrs)]
					wait = time.Duration(float64(time.Second) * (0.8 + 0.4*rand.Float64()))
				}
				if err := session(ctx, to, serverName, i, ids[i], opts, journal, st); err != nil && ctx.Err() == nil {
					st.Errors.Add(1)
					select {
					case <-ctx.Done():
					case <-time.After(wait):
					}
				}
			}
		}()
	}
	wg.Wait()
}

func session(ctx context.Context, addr, serverName string, idx int, id Identity, opts Options, journal *taskJournal, st *Stats) error {
	period := opts.Period
	tr := transport(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      id.Roots,
		ServerName:   serverName,
		Certificates: []tls.Certificate{id.Cert},
	})
	defer tr.CloseIdleConnections()
	c := directorv1connect.NewAgentServiceClient(&http.Client{Transport: tr}, baseURL(addr))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := c.Session(ctx)
	defer s.CloseRequest() //nolint:errcheck // the stream is being dropped
	if err := s.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{
		NodeId:    id.NodeID,
		Host:      &directorv1.HostFacts{Hostname: id.Cert.Leaf.Subject.CommonName, AgentVersion: "loadgen"},
		TaskKinds: opts.TaskKinds,
	}}}); err != nil {
		return err
	}
	first, err := s.Receive()
	if err != nil {
		return err
	}
	if first.GetRegistered() == nil {
		return errors.New("first answer is not Registered")
	}
	st.Registered.Add(1)
	if opts.OnRegistered != nil {
		opts.OnRegistered(idx, first.GetRegistered().GetReplicaId())
	}
	recvErr := make(chan error, 1)
	var sendMu sync.Mutex
	send := func(m *directorv1.SessionRequest) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = s.Send(m) // a failed stream shows in Receive
	}
	status := func(st *directorv1.TaskStatus) {
		send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: st}})
	}
	go func() {
		for {
			m, err := s.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			switch msg := m.GetMsg().(type) {
			case *directorv1.SessionResponse_HeartbeatAck:
				st.Acks.Add(1)
			case *directorv1.SessionResponse_Resync:
				st.Resyncs.Add(1)
				send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Inventory{Inventory: syntheticInventory(id.NodeID, msg.Resync.GetResyncId(), opts.VMs)}})
			case *directorv1.SessionResponse_Task:
				if len(opts.TaskKinds) == 0 {
					continue
				}
				tid := msg.Task.GetId()
				journal.mu.Lock()
				last, seen := journal.m[tid]
				q := &directorv1.TaskStatus{TaskId: tid, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED}
				if !seen {
					journal.m[tid] = q
				}
				journal.mu.Unlock()
				if seen {
					st.Duplicates.Add(1)
					status(last)
					continue
				}
				st.Tasks.Add(1)
				status(q)
				go func() {
					select {
					case <-ctx.Done():
						return
					case <-time.After(opts.TaskDelay):
					}
					done := &directorv1.TaskStatus{TaskId: tid, Seq: 2, Phase: directorv1.TaskPhase_TASK_PHASE_SUCCEEDED}
					journal.mu.Lock()
					journal.m[tid] = done
					journal.mu.Unlock()
					status(done)
				}()
			}
		}
	}()
	wait := time.Duration(rand.Int64N(int64(period)))
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return err
		case <-time.After(wait):
		}
		sendMu.Lock()
		err := s.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Heartbeat{Heartbeat: &directorv1.Heartbeat{Seq: seq}}})
		sendMu.Unlock()
		if err != nil {
			return err
		}
		wait = time.Duration(float64(period) * (0.9 + 0.2*rand.Float64()))
	}
}

// taskJournal is a simulated agent's memory of the tasks it ran: each
// id's last status.
type taskJournal struct {
	mu sync.Mutex
	m  map[string]*directorv1.TaskStatus
}

// syntheticInventory is n made-up MANAGED VMs of node, the same ones on
// every call (epoch and uids derive from the node id).
func syntheticInventory(node, resyncID string, n int) *directorv1.Inventory {
	inv := &directorv1.Inventory{Epoch: "loadgen-" + node, Generation: 1, ResyncId: resyncID}
	for i := range n {
		inv.Vms = append(inv.Vms, &directorv1.InventoryVM{
			Uid: fmt.Sprintf("%.8s-0000-4000-8000-%012d", node, i), Name: fmt.Sprintf("vm-%03d", i),
			Class: "MANAGED", Phase: "Running", Generation: 1, ObservedGeneration: 1, Cpus: 1, MemoryMib: 512,
		})
	}
	return inv
}
