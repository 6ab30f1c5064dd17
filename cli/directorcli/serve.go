package directorcli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/etcdstore"
	"github.com/virtcon/virtcon/internal/duration"
)

// serveOptions are serve's flags.
type serveOptions struct {
	Listen        string
	Advertise     string
	EtcdEndpoints []string
	EtcdCACert    string
	EtcdCert      string
	EtcdKey       string
	EtcdPrefix    string
	KEKFile       string
	NewCA         bool
	// ReplicaID names this replica (default: made once, kept in
	// <data>/replica-id); TaskRetention is how long tasks are kept;
	// EtcdRequestTimeout bounds each etcd request.
	ReplicaID          string
	TaskRetention      time.Duration
	EtcdRequestTimeout time.Duration
	LogLevel           string
	LogFormat          string
	// liveness: the heartbeat period told to agents, and the silences
	// after which a node is Degraded, then Offline
	HeartbeatInterval time.Duration
	DegradedAfter     time.Duration
	OfflineAfter      time.Duration
}

// validate checks the flags before the director opens anything.
func (o *serveOptions) validate() error {
	if err := checkListen(o.Listen); err != nil {
		return &UsageError{fmt.Errorf("--listen %q: %w", o.Listen, err)}
	}
	if err := checkAdvertise(o.Advertise); err != nil {
		return &UsageError{fmt.Errorf("--advertise %q: %w", o.Advertise, err)}
	}
	for _, ep := range o.EtcdEndpoints {
		if err := checkEndpoint(ep); err != nil {
			return &UsageError{fmt.Errorf("--etcd-endpoints %q: %w", ep, err)}
		}
	}
	if len(o.EtcdEndpoints) == 0 {
		for _, f := range []struct{ name, v string }{{"--etcd-cacert", o.EtcdCACert}, {"--etcd-cert", o.EtcdCert}, {"--etcd-key", o.EtcdKey}} {
			if f.v != "" {
				return &UsageError{fmt.Errorf("%s: only with --etcd-endpoints (the embedded etcd needs no TLS files)", f.name)}
			}
		}
	}
	if (o.EtcdCert == "") != (o.EtcdKey == "") {
		return &UsageError{errors.New("--etcd-cert and --etcd-key go together")}
	}
	if o.EtcdPrefix != "" && !strings.HasPrefix(o.EtcdPrefix, "/") {
		return &UsageError{fmt.Errorf("--etcd-prefix %q: want a key prefix starting with / (default /virtcon-director/v1/)", o.EtcdPrefix)}
	}
	if o.ReplicaID != "" && !director.ValidReplicaID(o.ReplicaID) {
		return &UsageError{fmt.Errorf("--replica-id %q: want one DNS label (letters, digits, inner '-'; at most 63)", o.ReplicaID)}
	}
	if o.TaskRetention < time.Hour {
		return &UsageError{fmt.Errorf("--task-retention %s: want at least 1h", o.TaskRetention)}
	}
	if o.EtcdRequestTimeout < 100*time.Millisecond || o.EtcdRequestTimeout > time.Minute {
		return &UsageError{fmt.Errorf("--etcd-request-timeout %s: want 100ms to 1m", o.EtcdRequestTimeout)}
	}
	if o.HeartbeatInterval < time.Second {
		return &UsageError{fmt.Errorf("--heartbeat-interval %s: want at least 1s", o.HeartbeatInterval)}
	}
	if o.DegradedAfter < 2*o.HeartbeatInterval {
		return &UsageError{fmt.Errorf("--degraded-after %s: want at least two heartbeats (2 x --heartbeat-interval %s): one late heartbeat is not a sick node", o.DegradedAfter, o.HeartbeatInterval)}
	}
	if o.OfflineAfter <= o.DegradedAfter {
		return &UsageError{fmt.Errorf("--offline-after %s: want more than --degraded-after %s", o.OfflineAfter, o.DegradedAfter)}
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		return err
	}
	switch o.LogFormat {
	case "text", "json":
	default:
		return &UsageError{fmt.Errorf("--log-format: unknown format %q (want text or json)", o.LogFormat)}
	}
	return nil
}

func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want [HOST]:PORT (:9443, 127.0.0.1:9443, [::1]:9443)")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want 0-65535", port)
	}
	return nil
}

// checkAdvertise accepts HOST or HOST:PORT, an IPv6 host in brackets;
// the director adds --listen's port when there is none.
func checkAdvertise(adv string) error {
	if adv == "" {
		return nil
	}
	host := adv
	if h, port, err := net.SplitHostPort(adv); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q: want 1-65535", port)
		}
		host = h
	} else if strings.HasPrefix(adv, "[") && strings.HasSuffix(adv, "]") {
		host = adv[1 : len(adv)-1]
	} else if strings.Contains(adv, ":") {
		return errors.New("want HOST or HOST:PORT ([IPv6] or [IPv6]:PORT for an IPv6 address)")
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n/@#[]") {
		return errors.New("want a host name or address")
	}
	return nil
}

func checkEndpoint(ep string) error {
	if ep == "" {
		return errors.New("empty endpoint")
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" && u.Path == "" {
		return errors.New("want a URL (https://10.0.0.5:2379)")
	}
	switch u.Scheme {
	case "http", "https", "unix", "unixs":
		return nil
	}
	return fmt.Errorf("scheme %q: want https (or http, unix, unixs)", u.Scheme)
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, &UsageError{fmt.Errorf("--log-level: unknown level %q (want debug, info, warn or error)", s)}
}

// logger is serve's log on stderr in --log-format at --log-level.
func (o *serveOptions) logger(env *Env) *slog.Logger {
	lvl, _ := parseLevel(o.LogLevel)
	ho := &slog.HandlerOptions{Level: lvl}
	if o.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(env.IO.ErrOut, ho))
	}
	return slog.New(slog.NewTextHandler(env.IO.ErrOut, ho))
}

func newServeCmd(env *Env) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the director: the agents' TLS listener and the admin socket",
		Long: `Run the director until SIGINT or SIGTERM (then it says goodbye to the agents'
sessions and stops; a second signal ends it at once). Agents connect to
--listen (TLS 1.3, HTTP/2, client certificates); the admin commands use the
socket <data>/admin.sock (root only). State is in etcd: an embedded member in
<data>/etcd, or an external cluster (--etcd-endpoints). The CA's private keys
are sealed in etcd under the key encryption key --ca-kek-file (default
<data>/ca.kek): back it up, without it no host can enrol or renew.

Each replica keeps <data>/recovery.json (0600): the sealed CA, the nodes, their
certificates and revocations. If etcd loses its data, the director restores
them from it and the hosts reconnect with the certificates they hold; without
it, a data directory with a key refuses to make a second CA unless --new-ca
is given (every host would then have to enrol again).

When ready it prints "virt-director: serving on ADDR, CA pin sha256:..." to
stderr; logs go to stderr too (--log-format text or json).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			run := env.serve
			if run == nil {
				run = runDirector
			}
			return run(cmd.Context(), env, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Listen, "listen", ":9443", "the agents' TLS listener, `[HOST]:PORT`")
	fl.StringVar(&o.Advertise, "advertise", "", "the `HOST[:PORT]` join strings name (default: this host's name and --listen's port)")
	fl.StringSliceVar(&o.EtcdEndpoints, "etcd-endpoints", nil, "an external etcd cluster's client `URL`s, comma-separated (default: an embedded member in <data>/etcd)")
	fl.StringVar(&o.EtcdCACert, "etcd-cacert", "", "the external cluster's CA certificate (PEM `FILE`)")
	fl.StringVar(&o.EtcdCert, "etcd-cert", "", "the client certificate for the external cluster (PEM `FILE`, with --etcd-key)")
	fl.StringVar(&o.EtcdKey, "etcd-key", "", "the client certificate's key (PEM `FILE`)")
	fl.StringVar(&o.EtcdPrefix, "etcd-prefix", "", "the etcd key `PREFIX` of this director's state (default /virtcon-director/v1/)")
	fl.StringVar(&o.KEKFile, "ca-kek-file", "", "the CA's key encryption key, 32 bytes (`FILE`, default <data>/ca.kek; made when missing)")
	fl.BoolVar(&o.NewCA, "new-ca", false, "if the store has no CA and there is no recovery.json, make a new CA although <data> has a key (every host must enrol again)")
	fl.StringVar(&o.ReplicaID, "replica-id", "", "this replica's `ID`, one DNS label (default: made once and kept in <data>/replica-id)")
	fl.Var(duration.NewValue(&o.TaskRetention, director.DefaultTaskRetention), "task-retention", "how long tasks are kept, ended or not")
	fl.Var(duration.NewValue(&o.EtcdRequestTimeout, etcdstore.DefaultRequestTimeout), "etcd-request-timeout", "how long an etcd request may take before it fails Unavailable (a cluster without quorum)")
	fl.Var(duration.NewValue(&o.HeartbeatInterval, director.DefaultHeartbeatInterval), "heartbeat-interval", "how often agents heartbeat (told to them when they register)")
	fl.Var(duration.NewValue(&o.DegradedAfter, director.DefaultDegradedAfter), "degraded-after", "a node silent this long is Degraded (its VMs shown as unknown, never stopped)")
	fl.Var(duration.NewValue(&o.OfflineAfter, director.DefaultOfflineAfter), "offline-after", "a node silent this long is Offline")
	fl.StringVar(&o.LogLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	fl.StringVar(&o.LogFormat, "log-format", "text", "log format on stderr: text or json")
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
