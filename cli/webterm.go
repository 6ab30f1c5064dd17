package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/webterm"
)

// webtermOptions are virt webterm's flags.
type webtermOptions struct {
	listen      string
	allowHosts  []string
	dcui        string
	maxSessions int
	maxPerUser  int
	idleTimeout time.Duration
	pamService  string
	adminGroup  string
}

// webtermEUID is os.Geteuid; a test seam.
var webtermEUID = os.Geteuid

func newWebtermCmd(env *Env) *cobra.Command {
	o := &webtermOptions{}
	cmd := &cobra.Command{
		Use:   "webterm",
		Short: "Serve the DCUI in a browser over HTTPS (the web terminal)",
		Long: `Serve the DCUI in a browser: https://HOST:8443/ (--listen), a login with the
host's PAM users (root and the admin group, as on the console), then the DCUI in
a terminal of its own per browser tab. HTTPS only (TLS 1.2 or later), no plain
HTTP. The certificate is the admin's /etc/virtcon/tls/cert.pem and key.pem when
present, else a self-signed one made on first start for the host's names and
addresses; its SHA-256 fingerprint is printed at start, shown by
virt webterm status and on the DCUI's status screen, so that it can be checked
on the first visit.

A browser may reach it by the certificate's names and addresses and the names
given with --allow-host (for a DNS name the certificate does not carry, or a
reverse proxy in front); a request for any other name is refused, as is a page
of another site. At most --max-sessions sessions run at once, --max-per-user
per user; a session ends after --idle-timeout without a key press (the browser
is warned a minute before) and 8 hours after its login in any case.

It runs until SIGTERM or SIGINT, then ends every session. It needs root: PAM
checks other users' passwords only for root, and each session's DCUI starts
logged in, which only root may ask of it. The dcui program (cgo, PAM) is the one
next to virt, else the one on PATH (--dcui). The unit virtcon-webterm.service
runs it; it is not enabled by the package.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := env.Logger
			if !cmd.Flags().Changed("log-level") {
				// a server says where it listens and who logs in
				log = slog.New(slog.NewTextHandler(env.IO.ErrOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			return runWebterm(cmd.Context(), env, log, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.listen, "listen", ":8443", "listen on `ADDRESS` (host:port; an empty host is every address)")
	fl.StringArrayVar(&o.allowHosts, "allow-host", nil, "also accept the browser's Host and Origin `NAME` (repeatable): a name or address the certificate does not carry")
	fl.StringVar(&o.dcui, "dcui", "", "the dcui `PROGRAM` each session runs (default: next to virt, else on PATH)")
	fl.IntVar(&o.maxSessions, "max-sessions", webterm.DefaultMaxSessions, "sessions at most in all")
	fl.IntVar(&o.maxPerUser, "max-per-user", webterm.DefaultMaxPerUser, "sessions at most per user")
	fl.Var(duration.NewValue(&o.idleTimeout, auth.DefaultIdleTimeout), "idle-timeout", "end a session after this long without a key press (300, 300s, 5m); the browser is warned a minute before (a quarter of it when that is shorter)")
	fl.StringVar(&o.pamService, "pam-service", auth.DefaultService, "PAM service used to log in (/etc/pam.d/NAME), as the DCUI's")
	fl.StringVar(&o.adminGroup, "admin-group", auth.DefaultGroup, "group whose members (and root) may log in, as on the DCUI")
	cmd.AddCommand(newWebtermStatusCmd(env))
	return cmd
}

func (o *webtermOptions) validate() error {
	switch {
	case o.maxSessions < 1:
		return &UsageError{fmt.Errorf("--max-sessions %d: want 1 or more", o.maxSessions)}
	case o.maxPerUser < 1:
		return &UsageError{fmt.Errorf("--max-per-user %d: want 1 or more", o.maxPerUser)}
	case o.idleTimeout < 2*time.Second:
		return &UsageError{fmt.Errorf("--idle-timeout %s: want 2s or more", o.idleTimeout)}
	case o.pamService == "" || strings.ContainsAny(o.pamService, "/\x00") || o.pamService == "." || o.pamService == "..":
		return &UsageError{fmt.Errorf("--pam-service %q: want a file name under /etc/pam.d", o.pamService)}
	case o.adminGroup == "":
		return &UsageError{fmt.Errorf("--admin-group %q: want a group name", o.adminGroup)}
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return &UsageError{fmt.Errorf("--listen %q: want HOST:PORT or :PORT: %w", o.listen, err)}
	}
	for _, h := range o.allowHosts {
		if h == "" || strings.ContainsAny(h, "/@ ") || strings.Contains(h, "://") {
			return &UsageError{fmt.Errorf("--allow-host %q: want a DNS name or an IP address, without scheme or port", h)}
		}
		if _, _, err := net.SplitHostPort(h); err == nil {
			return &UsageError{fmt.Errorf("--allow-host %q: want a name without a port (the port is never compared)", h)}
		}
	}
	return nil
}

// webtermDCUI is the dcui program a session runs: --dcui, else the one
// next to virt or on PATH. It must be there: it carries PAM (virt is
// built without cgo).
func webtermDCUI(flag string) (string, error) {
	if flag == "" {
		p, err := dcuiBinary()
		if err != nil {
			return "", fmt.Errorf("web terminal: %w; it runs each session and PAM (--dcui PATH names it)", err)
		}
		return p, nil
	}
	p, err := filepath.Abs(flag)
	if err != nil {
		return "", &UsageError{fmt.Errorf("--dcui %q: %w", flag, err)}
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return "", &UsageError{fmt.Errorf("--dcui %q: %w", flag, err)}
	case !st.Mode().IsRegular() || st.Mode()&0o111 == 0:
		return "", &UsageError{fmt.Errorf("--dcui %q: not an executable file", flag)}
	}
	return p, nil
}

func runWebterm(ctx context.Context, env *Env, log *slog.Logger, o *webtermOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	if uid := webtermEUID(); uid != 0 {
		return fmt.Errorf("web terminal: %w: needs root (PAM checks other users' passwords only for root, and each session's DCUI starts logged in); running as uid %d", ErrNotPermitted, uid)
	}
	dcui, err := webtermDCUI(o.dcui)
	if err != nil {
		return err
	}
	layout := env.Layout()
	names, addrs, err := webterm.LocalNames(env.HostRoot)
	if err != nil {
		return fmt.Errorf("web terminal: the host's names: %w", err)
	}
	certOpts := webterm.CertOptions{
		Dir:      filepath.Join(layout.ConfigDir(), "tls"),
		StateDir: filepath.Join(layout.StateDir(), "webterm"),
		Names:    names,
		Addrs:    addrs,
	}
	cert, err := webterm.EnsureCert(ctx, log, certOpts)
	if err != nil {
		return fmt.Errorf("web terminal: %w", err)
	}
	if cert.Expired {
		log.Warn("web terminal: the admin's certificate is expired (or not yet valid); serving it anyway", "file", cert.CertFile, "notAfter", cert.NotAfter)
	}
	srv, err := webterm.New(webterm.Options{
		Layout: layout, Logger: log,
		Certificate:   cert.TLS,
		Static:        webterm.Static,
		AllowHosts:    append(slices.Clone(cert.SANs), o.allowHosts...),
		Authenticator: env.Host().Auth(auth.Options{PAMProcess: dcui, Service: o.pamService, Group: o.adminGroup}),
		DCUI:          dcui,
		MaxSessions:   o.maxSessions, MaxPerUser: o.maxPerUser,
		IdleTimeout: o.idleTimeout, IdleWarning: min(webterm.DefaultIdleWarning, o.idleTimeout/4),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("web terminal: listen on %s: %w", o.listen, err)
	}
	defer ln.Close()
	bound := ln.Addr().String()
	urls := webtermURLs(bound, cert.SANs)
	if err := webterm.Write(layout, webterm.Record{Listen: bound, URLs: urls, CertSHA256: cert.SHA256}); err != nil {
		return fmt.Errorf("web terminal: %w", err)
	}
	defer func() {
		if err := webterm.Remove(layout); err != nil {
			log.Error("web terminal: record not removed", "err", err)
		}
	}()
	// a server up for a year would serve an expired certificate: check
	// it daily, with the host's names as they are then
	go renewCert(ctx, log, srv, cert.SHA256, func(ctx context.Context) (*webterm.Cert, error) {
		if names, addrs, err := webterm.LocalNames(env.HostRoot); err == nil {
			certOpts.Names, certOpts.Addrs = names, addrs
		}
		return webterm.EnsureCert(ctx, log, certOpts)
	}, func(c *webterm.Cert) error {
		return webterm.Write(layout, webterm.Record{Listen: bound, URLs: webtermURLs(bound, c.SANs), CertSHA256: c.SHA256})
	})
	log.Info("web terminal listening", "listen", bound, "urls", strings.Join(urls, " "), "certSha256", cert.SHA256,
		"certificate", cert.Source, "dcui", dcui)
	for _, u := range urls {
		fmt.Fprintf(env.IO.ErrOut, "virt webterm: serving %s\n", u)
	}
	fmt.Fprintf(env.IO.ErrOut, "virt webterm: certificate SHA-256 %s (%s)\n", cert.SHA256, cert.Source)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	log.Info("web terminal stopped")
	return nil
}

// webtermRenewEvery is how often a running web terminal checks its
// certificate (EnsureCert remakes a self-made one with fewer than 30 days
// left or when the host's names changed); a test seam.
var webtermRenewEvery = 24 * time.Hour

// renewCert runs ensure every webtermRenewEvery until ctx ends; a
// certificate other than the one served goes to srv (new handshakes) and
// to the record (recorded), so that the fingerprint the DCUI shows is the
// one the browser sees.
func renewCert(ctx context.Context, log *slog.Logger, srv interface{ SetCertificate(tls.Certificate) }, serving string,
	ensure func(context.Context) (*webterm.Cert, error), recorded func(*webterm.Cert) error) {
	t := time.NewTicker(webtermRenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, err := ensure(ctx)
		if err != nil {
			log.Error("web terminal: certificate check failed; serving the one it has", "err", err)
			continue
		}
		if c.SHA256 == serving {
			continue
		}
		srv.SetCertificate(c.TLS)
		serving = c.SHA256
		if err := recorded(c); err != nil {
			log.Error("web terminal: record not updated with the renewed certificate", "err", err)
		}
		log.Info("web terminal: serving a renewed certificate", "certSha256", c.SHA256, "certificate", c.Source, "notAfter", c.NotAfter)
	}
}

// webtermURLs are the addresses an operator can open: for a listener on
// every address, one per certificate name and non-loopback address (the
// addresses first: the DCUI matches them to its interfaces), else the
// listener's own address.
func webtermURLs(bound string, sans []string) []string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return nil
	}
	url := func(h string) string {
		if port != "443" {
			h = net.JoinHostPort(h, port)
		} else if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		return "https://" + h + "/"
	}
	if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
		return []string{url(a.Unmap().String())}
	}
	var ips, names []string
	for _, s := range sans {
		if a, err := netip.ParseAddr(s); err == nil {
			if !a.IsLoopback() {
				ips = append(ips, url(a.String()))
			}
			continue
		}
		if !strings.EqualFold(s, "localhost") {
			names = append(names, url(s))
		}
	}
	out := append(ips, names...)
	if len(out) == 0 {
		out = []string{url("localhost")}
	}
	return out
}

// webtermStatus is what virt webterm status reports (-o json: stable).
type webtermStatus struct {
	Listen     string                `json:"listen" yaml:"listen"`
	URLs       []string              `json:"urls" yaml:"urls"`
	CertSHA256 string                `json:"certSha256" yaml:"certSha256"`
	PID        int                   `json:"pid" yaml:"pid"`
	Sessions   []webtermSessionState `json:"sessions" yaml:"sessions"`
}

type webtermSessionState struct {
	User     string    `json:"user" yaml:"user"`
	Source   string    `json:"source" yaml:"source"`
	Since    time.Time `json:"since" yaml:"since"`
	ReadOnly bool      `json:"readOnly" yaml:"readOnly"`
	TTY      string    `json:"tty" yaml:"tty"`
	Attached bool      `json:"attached" yaml:"attached"`
}

// ErrWebtermNotRunning: no live web terminal record.
var ErrWebtermNotRunning = errors.New("no web terminal is running")

func newWebtermStatusCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the running web terminal: its URLs, certificate fingerprint and sessions",
		Long: `Show the running web terminal from its runtime record: where it listens, its
URLs, the SHA-256 fingerprint of its certificate (compare it with what the
browser shows on the first visit), and its sessions: user, source address,
since when, and whether the session is read-only (another console holds the
console lock). Exit status 1 when none runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			layout := env.Layout()
			rec, err := webterm.Read(layout)
			if err != nil {
				return fmt.Errorf("web terminal status: %w", err)
			}
			if rec == nil {
				return fmt.Errorf("%w (start it with virt webterm, or systemctl start virtcon-webterm)", ErrWebtermNotRunning)
			}
			sessions, err := webterm.ReadSessions(layout, rec)
			if err != nil {
				return fmt.Errorf("web terminal status: %w", err)
			}
			st := webtermStatus{Listen: rec.Listen, URLs: rec.URLs, CertSHA256: rec.CertSHA256, PID: rec.PID, Sessions: []webtermSessionState{}}
			if st.URLs == nil {
				st.URLs = []string{}
			}
			for _, s := range sessions {
				st.Sessions = append(st.Sessions, webtermSessionState{
					User: s.User, Source: s.Source, Since: s.Since, ReadOnly: s.ReadOnly, TTY: s.TTY, Attached: s.Attached,
				})
			}
			return render(env.IO.Out, env.Output, st, func(w io.Writer) error { return st.table(w) })
		},
	}
}

func (st webtermStatus) table(w io.Writer) error {
	fmt.Fprintf(w, "LISTEN\t%s\n", st.Listen)
	for _, u := range st.URLs {
		fmt.Fprintf(w, "URL\t%s\n", u)
	}
	fmt.Fprintf(w, "FINGERPRINT\t%s\n", st.CertSHA256)
	fmt.Fprintf(w, "PID\t%d\n", st.PID)
	fmt.Fprintf(w, "SESSIONS\t%s\n", strconv.Itoa(len(st.Sessions)))
	if len(st.Sessions) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "USER\tSOURCE\tSINCE\tMODE\tTTY\tBROWSER")
	for _, s := range st.Sessions {
		mode, browser := "RW", "connected"
		if s.ReadOnly {
			mode = "RO"
		}
		if !s.Attached {
			browser = "reconnecting"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.User, s.Source, s.Since.Local().Format("2006-01-02 15:04"), mode, s.TTY, browser)
	}
	return nil
}
