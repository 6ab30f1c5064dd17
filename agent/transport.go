package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// HTTP/2 pings catch a half-open TCP connection (a director whose host
// vanished): a ping after SendPingTimeout without a frame, the
// connection closed after PingTimeout without its answer.
const (
	sendPingTimeout  = 20 * time.Second
	pingTimeout      = 10 * time.Second
	handshakeTimeout = 15 * time.Second
	dialTimeout      = 15 * time.Second
)

// DialFunc dials a TCP connection (net.Dialer.DialContext's shape).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// newClient is an HTTP client speaking HTTP/2 over TLS 1.3 only with tc,
// on a transport of its own: a new one per connection attempt, so that a
// renewed certificate is never hidden behind a pooled connection that
// keeps presenting the old one. No proxy from the environment: the
// director is dialled directly.
func newClient(tc *tls.Config, dial DialFunc) (*http.Client, *http.Transport) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	tc.MinVersion = tls.VersionTLS13
	var protos http.Protocols
	protos.SetHTTP2(true)
	tr := &http.Transport{
		DialContext:         dial,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: handshakeTimeout,
		ForceAttemptHTTP2:   true,
		Protocols:           &protos,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: sendPingTimeout, PingTimeout: pingTimeout},
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: tr}, tr
}

// mtlsConfig trusts the director's root CA (ca.pem) and nothing else, for
// serverName (the host dialled: each replica's certificate names its own
// address; the pin is the shared root), and presents the node's
// certificate.
func (id *identity) mtlsConfig(now func() time.Time, serverName string) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(id.root)
	cert := id.cert
	return &tls.Config{
		RootCAs:    roots,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		},
		Time: now,
	}
}

func baseURL(addr string) string { return "https://" + addr }

// clientOptions are the connect options of every director client.
func clientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithReadMaxBytes(4 << 20)}
}
