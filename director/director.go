package director

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director/ca"
	"github.com/virtcon/virtcon/director/etcdstore"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/buildinfo"
)

// Defaults of Options.
const (
	DefaultListen            = ":9443"
	DefaultDegradedAfter     = 30 * time.Second
	DefaultOfflineAfter      = 90 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultReportInterval    = 60 * time.Second
	DefaultAuditRetention    = 30 * 24 * time.Hour
	DefaultSweepEvery        = time.Second
)

// Names of the director's files in its data directory.
const (
	AdminSocketName = "admin.sock"
	KEKFileName     = "ca.kek"
)

// Options configure a Director. Only DataDir is required.
type Options struct {
	// DataDir holds every file of the director: etcd/ (embedded member),
	// ca.kek, admin.sock and lock. Made 0700.
	DataDir string
	// Listen is the TLS listener's address, DefaultListen when empty.
	Listen string
	// Advertise is the host[:port] join strings name; without a port the
	// listener's is added. Default: the hostname and the listener's port.
	// It is stored in etcd (config/advertise).
	Advertise string
	// Etcd selects the store; DataDir and Logger are filled in when empty.
	// Without Endpoints the store is an embedded member in DataDir/etcd.
	Etcd etcdstore.Options
	// KEKFile is the CA's key encryption key, DataDir/ca.kek by default.
	KEKFile string
	// NewCA lets a store without a CA get a new one although this data
	// directory has a key and no recovery file (see ErrSecondCA).
	NewCA bool
	// Now is the only clock for liveness, token expiry and certificate
	// validity (tls.Config.Time too). time.Now when nil.
	Now func() time.Time

	DegradedAfter     time.Duration // silence until Degraded (30 s)
	OfflineAfter      time.Duration // silence until Offline (90 s)
	HeartbeatInterval time.Duration // told to agents (10 s)
	ReportInterval    time.Duration // told to agents (60 s)
	CertLifetime      time.Duration // node certificates (enroll.CertLifetime)
	AuditRetention    time.Duration // audit entries' lease (30 d)
	SweepEvery        time.Duration // liveness sweep period (1 s)
	TaskRetention     time.Duration // how long tasks are kept (7 d)
	TaskSweepEvery    time.Duration // the task sweeper's period (5 s)

	// ReplicaID names this replica (agents see it in Registered, the
	// admin in ListReplicas): label characters, at most 63. Default: a
	// random id made once and kept in DataDir/replica-id.
	ReplicaID string

	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.DataDir == "" {
		return errors.New("director: no data directory")
	}
	abs, err := filepath.Abs(o.DataDir)
	if err != nil {
		return fmt.Errorf("director: data directory %q: %w", o.DataDir, err)
	}
	o.DataDir = abs
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.KEKFile == "" {
		o.KEKFile = filepath.Join(o.DataDir, KEKFileName)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Etcd.DataDir == "" {
		o.Etcd.DataDir = o.DataDir
	}
	if o.Etcd.Logger == nil {
		o.Etcd.Logger = o.Logger
	}
	for _, d := range []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"DegradedAfter", &o.DegradedAfter, DefaultDegradedAfter},
		{"OfflineAfter", &o.OfflineAfter, DefaultOfflineAfter},
		{"HeartbeatInterval", &o.HeartbeatInterval, DefaultHeartbeatInterval},
		{"ReportInterval", &o.ReportInterval, DefaultReportInterval},
		{"CertLifetime", &o.CertLifetime, enroll.CertLifetime},
		{"AuditRetention", &o.AuditRetention, DefaultAuditRetention},
		{"SweepEvery", &o.SweepEvery, DefaultSweepEvery},
		{"TaskRetention", &o.TaskRetention, DefaultTaskRetention},
		{"TaskSweepEvery", &o.TaskSweepEvery, DefaultTaskSweepEvery},
	} {
		if *d.p < 0 {
			return fmt.Errorf("director: %s %s: want > 0", d.name, *d.p)
		}
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	if o.OfflineAfter <= o.DegradedAfter {
		return fmt.Errorf("director: OfflineAfter %s: want more than DegradedAfter %s", o.OfflineAfter, o.DegradedAfter)
	}
	return nil
}

// Stats are counters for tests and benchmarks.
type Stats struct {
	// EnrollAttempts counts every Enroll request that reached the
	// handler; EnrollOK those that got a certificate.
	EnrollAttempts, EnrollOK int64
	// Sessions is the number of live agent sessions.
	Sessions int
}

// Director is a running director: its store, CA, listeners and the
// in-memory state of sessions, liveness and revocations.
type Director struct {
	opts      Options
	log       *slog.Logger
	now       func() time.Time
	store     *etcdstore.Store
	ca        *ca.Authority
	advertise string
	version   string
	replicaID string
	startedAt time.Time

	ln        net.Listener
	adminLn   net.Listener
	adminPath string
	euid      int
	dummyHash string
	serving   servingCert

	bg     context.Context // ends at Close: watches and the sweeper
	cancel context.CancelFunc
	wg     sync.WaitGroup

	stopping chan struct{} // closed when Serve begins shutting down
	stopOnce sync.Once
	served   atomic.Bool

	mu          sync.Mutex
	revoked     map[string]revokedRecord // serial → why
	revokedLive bool                     // the revoked/ watch is current
	nodesLive   bool                     // the nodes/ watch is current
	// revokedNodes are the nodes whose record says revoked (node → why):
	// refused whatever their serials, even one whose revoked/ record a
	// failed write left out.
	revokedNodes map[string]string
	sessions     map[string]*liveSession // node → its session
	reports      map[string]*nodeReport  // node → last report
	live         *tracker

	invMu sync.Mutex
	inv   map[string]*nodeInventory // held nodes' inventories

	ha haState // replicas, sessions' holders, leadership (ha.go)

	enrollAttempts, enrollOK atomic.Int64
	enrollFails              failLimiter // failed enrolments per source

	closeOnce sync.Once
	closeErr  error
}

// Open takes the data directory, opens the store (starting the embedded
// etcd member), loads or creates the CA, binds the TLS listener and the
// admin socket and loads the revocations and nodes. Serve then serves.
func Open(ctx context.Context, opts Options) (_ *Director, err error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("director: %w", err)
	}
	if err := os.Chmod(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("director: %w", err)
	}
	d := &Director{
		opts:         opts,
		log:          opts.Logger,
		now:          opts.Now,
		version:      buildinfo.Get().Version,
		euid:         os.Geteuid(),
		adminPath:    filepath.Join(opts.DataDir, AdminSocketName),
		dummyHash:    enroll.HashSecret("00000000000000000000000000000000"),
		stopping:     make(chan struct{}),
		revoked:      map[string]revokedRecord{},
		revokedNodes: map[string]string{},
		sessions:     map[string]*liveSession{},
		reports:      map[string]*nodeReport{},
		inv:          map[string]*nodeInventory{},
	}
	d.live = newTracker(opts.Now, opts.DegradedAfter, opts.OfflineAfter)
	d.haInit()
	d.bg, d.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	if d.replicaID, err = loadReplicaID(opts.DataDir, opts.ReplicaID); err != nil {
		return nil, err
	}
	d.startedAt = d.now()
	if d.store, err = etcdstore.Open(ctx, opts.Etcd); err != nil {
		return nil, fmt.Errorf("director: %w", err)
	}
	if err := d.openCA(ctx); err != nil {
		return nil, err
	}
	if d.ln, err = net.Listen("tcp", opts.Listen); err != nil {
		return nil, fmt.Errorf("director: listen: %w", err)
	}
	if d.advertise, err = advertiseAddr(opts.Advertise, d.ln.Addr()); err != nil {
		return nil, err
	}
	if err := d.store.Put(ctx, keyAdvertise, advertiseRecord{V: recordVersion, Addr: d.advertise}, 0); err != nil {
		return nil, fmt.Errorf("director: %w", err)
	}
	if err := d.serving.init(d.ca, servingNames(d.advertise), d.now); err != nil {
		return nil, fmt.Errorf("director: %w", err)
	}
	if d.adminLn, err = listenAdmin(d.adminPath); err != nil {
		return nil, err
	}
	if err := d.loadState(ctx); err != nil {
		return nil, err
	}
	if err := d.startTasks(ctx); err != nil {
		return nil, err
	}
	if err := d.startHA(ctx); err != nil {
		return nil, err
	}
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		d.sweepLoop(d.bg)
	}()
	go func() {
		defer d.wg.Done()
		d.recoveryLoop(d.bg)
	}()
	d.log.Info("director open", "data", opts.DataDir, "listen", d.ln.Addr().String(), "replica", d.replicaID,
		"advertise", d.advertise, "pin", d.ca.Pin(), "canSign", d.ca.CanSign())
	return d, nil
}

// openCA reads the CA from etcd or, on first start, creates it: the
// first director to commit ca/sealed wins, a loser opens the winner's.
//
// A store without a CA is not always a first start: after etcd lost its
// data, the CA comes back from this replica's recovery file; with a key
// file but no recovery file the director refuses (ErrSecondCA) unless
// Options.NewCA says to start over.
func (d *Director) openCA(ctx context.Context) error {
	_, statErr := os.Stat(d.opts.KEKFile)
	hadKEK := statErr == nil
	kek, err := ca.LoadOrCreateKEK(d.opts.KEKFile)
	if err != nil {
		return fmt.Errorf("director: %w", err)
	}
	for attempt := 0; attempt < 3; attempt++ {
		var rec caRecord
		_, err := d.store.Get(ctx, keyCA, &rec)
		if err == nil {
			a, err := ca.Open(ca.Sealed{RootCert: rec.RootCert, IntermediateCert: rec.IntermediateCert,
				RootKey: rec.RootKey, IntermediateKey: rec.IntermediateKey}, kek)
			if err != nil {
				return fmt.Errorf("director: CA in etcd with the key encryption key %s: %w", d.opts.KEKFile, err)
			}
			d.ca = a
			return nil
		}
		if !errors.Is(err, etcdstore.ErrNotFound) {
			return fmt.Errorf("director: read CA: %w", err)
		}
		if !d.opts.NewCA {
			r, err := readRecovery(d.recoveryPath())
			if err != nil {
				return err
			}
			if r != nil {
				if d.ca, err = d.restoreRecovery(ctx, r, kek); err != nil {
					return err
				}
				return nil
			}
			if hadKEK {
				return fmt.Errorf("director: %s: %w", d.opts.DataDir, ErrSecondCA)
			}
		}
		a, s, err := ca.Create(d.now(), kek)
		if err != nil {
			return fmt.Errorf("director: %w", err)
		}
		rec = caRecord{V: recordVersion, RootCert: s.RootCert, IntermediateCert: s.IntermediateCert,
			RootKey: s.RootKey, IntermediateKey: s.IntermediateKey}
		ok, err := d.store.Txn().IfAbsent(keyCA).Put(keyCA, rec, 0).Commit(ctx)
		if err != nil {
			return fmt.Errorf("director: store CA: %w", err)
		}
		if ok {
			d.log.Info("director: created the CA", "pin", a.Pin())
			d.ca = a
			return nil
		}
		// Another director stored its CA first: use that one.
	}
	return errors.New("director: CA: lost the race to create it three times and found none")
}

// advertiseAddr is host:port from Options.Advertise (host[:port]) and the
// listener's address.
func advertiseAddr(adv string, ln net.Addr) (string, error) {
	_, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return "", fmt.Errorf("director: listener address %s: %w", ln, err)
	}
	if adv == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("director: advertise: no address given and no hostname: %w", err)
		}
		return net.JoinHostPort(h, port), nil
	}
	if h, p, err := net.SplitHostPort(adv); err == nil {
		if _, err := strconv.ParseUint(p, 10, 16); err != nil || p == "0" {
			return "", fmt.Errorf("director: advertise %q: port %q: want 1-65535", adv, p)
		}
		if h == "" {
			return "", fmt.Errorf("director: advertise %q: no host", adv)
		}
		return adv, nil
	}
	host := adv
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return net.JoinHostPort(host, port), nil
}

// servingNames are the names the serving certificate is valid for: the
// advertised host and this machine's hostname (ca adds localhost and
// the loopback addresses).
func servingNames(advertise string) []string {
	var names []string
	if h, _, err := net.SplitHostPort(advertise); err == nil {
		names = append(names, h)
	}
	if h, err := os.Hostname(); err == nil {
		names = append(names, h)
	}
	return names
}

// Addr is the TLS listener's address (with the real port after ":0").
func (d *Director) Addr() string { return d.ln.Addr().String() }

// Advertise is the host:port join strings name.
func (d *Director) Advertise() string { return d.advertise }

// ReplicaID is this replica's id.
func (d *Director) ReplicaID() string { return d.replicaID }

// Pin is the root CA's SPKI pin, "sha256:<hex>".
func (d *Director) Pin() string { return d.ca.Pin() }

// AdminSocket is the admin socket's path.
func (d *Director) AdminSocket() string { return d.adminPath }

// Stats are the director's counters.
func (d *Director) Stats() Stats {
	d.mu.Lock()
	n := len(d.sessions)
	d.mu.Unlock()
	return Stats{EnrollAttempts: d.enrollAttempts.Load(), EnrollOK: d.enrollOK.Load(), Sessions: n}
}

// Serve serves the agents' TLS listener and the admin socket until ctx
// ends, then says Goodbye to the live sessions, waits a little for the
// calls in flight and returns nil. It returns an error only when a
// listener fails. A Director serves once.
func (d *Director) Serve(ctx context.Context) error {
	if !d.served.CompareAndSwap(false, true) {
		return errors.New("director: Serve called twice")
	}
	srv := d.newServer()
	adm := d.newAdminServer()
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(d.ln, "", "") }()
	go func() { errc <- adm.Serve(d.adminLn) }()
	var failed error
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			failed = fmt.Errorf("director: serve: %w", err)
		}
	}
	d.stopOnce.Do(func() { close(d.stopping) })
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := adm.Shutdown(sctx); err != nil {
		adm.Close()
	}
	os.Remove(d.adminPath)
	d.log.Info("director stopped serving", "listen", d.Addr())
	return failed
}

// Close stops the background work, the listeners (when Serve did not
// run) and the store. The director's VMs are the hosts': nothing here
// touches them.
func (d *Director) Close() error {
	d.closeOnce.Do(func() {
		d.stopOnce.Do(func() { close(d.stopping) })
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
		d.stopHA() // after the sessions' Goodbye: their keys go with the lease
		var errs []error
		if d.ln != nil {
			if err := d.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		if d.adminLn != nil {
			if err := d.adminLn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
			if err := os.Remove(d.adminPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if d.store != nil {
			errs = append(errs, d.store.Close())
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// AdminClient is an AdminService client over the admin unix socket at
// socketPath (HTTP/1.1, the Connect protocol).
func AdminClient(socketPath string) directorv1connect.AdminServiceClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns: 4,
	}
	return directorv1connect.NewAdminServiceClient(&http.Client{Transport: tr}, "http://admin.sock")
}
