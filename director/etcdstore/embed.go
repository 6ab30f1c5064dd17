package etcdstore

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/pkg/v3/featuregate"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds the embedded member's start when ctx has no sooner
// deadline: a single member still waits out one election (0.2-1.9 s here).
const startTimeout = 60 * time.Second

// maxSocketPath is sun_path's size less its terminating NUL.
const maxSocketPath = 107

// notListening is the peer URL the single member advertises. No peer
// listener is opened at all (ListenPeerUrls is empty), so nothing answers
// there; a single member never dials its own peer URL. The URL only has to
// exist because membership records one per member.
const notListening = "http://127.0.0.1:2380"

func socketPath(dataDir string) string { return filepath.Join(dataDir, "etcd.sock") }

// checkSocketPath refuses a data dir whose socket path would not fit.
func checkSocketPath(dataDir string) error {
	if sock := socketPath(dataDir); len(sock) > maxSocketPath {
		return fmt.Errorf("etcdstore: data dir %s: socket path %s is %d bytes, over the %d-byte unix socket limit", dataDir, sock, len(sock), maxSocketPath)
	}
	return nil
}

// embedConfig is the single-member configuration under dataDir (absolute).
func embedConfig(dataDir string, opts Options, lg *zap.Logger) (*embed.Config, string, error) {
	sock := socketPath(dataDir)
	// unix:// + absolute path: etcd listens on the file (a relative unix
	// URL would make etcd os.Remove() a directory).
	clientURL := url.URL{Scheme: "unix", Path: sock}
	peerURL, err := url.Parse(notListening)
	if err != nil {
		return nil, "", err
	}

	cfg := embed.NewConfig()
	cfg.Name = "director"
	cfg.Dir = filepath.Join(dataDir, "etcd")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenClientHttpUrls = nil
	cfg.ListenPeerUrls = nil // no peer listener: nothing reachable over TCP or an abstract socket
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.InitialClusterToken = "virtcon-director"
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the WAL exists
	// A lone member has nobody to lose heartbeats to; a short election
	// timeout only shortens the wait for its own election at a restart
	// (with 1000 ms: 0.3-1 s; etcd's minimum lease TTL is 1.5 x this).
	cfg.TickMs = 100
	cfg.ElectionMs = 500
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	cfg.SnapshotCount = 10000
	cfg.MaxSnapFiles = 5
	cfg.MaxWalFiles = 5
	cfg.QuotaBackendBytes = 2 << 30 // etcd's default and recommended ceiling
	cfg.EnableGRPCGateway = false
	cfg.Metrics = "basic"
	cfg.UnsafeNoFsync = opts.UnsafeNoFsync
	cfg.Logger = "zap"
	cfg.LogOutputs = []string{embed.StdErrLogOutput} // never probes journald; the builder below replaces it
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	// Without checkpoints a restart resets every lease to its full TTL: a
	// director restarted daily would never expire a 30-day audit entry.
	// With them the remaining TTL is persisted every 5 minutes.
	if err := cfg.ServerFeatureGate.(featuregate.MutableFeatureGate).Set("LeaseCheckpoint=true,LeaseCheckpointPersist=true"); err != nil {
		return nil, "", fmt.Errorf("etcdstore: feature gates: %w", err)
	}
	return cfg, clientURL.String(), nil
}

// startEmbedded starts the member and waits until it serves, for at most
// ctx's deadline or startTimeout.
func startEmbedded(ctx context.Context, cfg *embed.Config) (*embed.Etcd, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: start embedded etcd in %s: %w", cfg.Dir, err)
	}
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdstore: embedded etcd in %s: %w", cfg.Dir, err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcdstore: embedded etcd in %s: not ready: %w", cfg.Dir, ctx.Err())
	case <-t.C:
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcdstore: embedded etcd in %s: not ready after %s", cfg.Dir, startTimeout)
	}
	// The data dir is 0700 already; the socket gets 0600 as well so that
	// moving it or loosening the dir does not open it up.
	sock := cfg.ListenClientUrls[0].Path
	if err := os.Chmod(sock, 0o600); err != nil {
		e.Close()
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	return e, nil
}
