// Package s3store implements store.Store on any S3 API with minio-go.
package s3store

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config says where a bucket lives and how to reach it.
type Config struct {
	// Endpoint is a URL such as "https://s3.amazonaws.com" or
	// "http://127.0.0.1:9000". A bare host[:port] means https.
	Endpoint string
	Region   string
	// PathStyle forces path-style requests (http://host/bucket/key), which
	// MinIO and most self-hosted servers want. Otherwise the style is
	// chosen from the endpoint (virtual-host for AWS).
	PathStyle bool
	// CABundle is a PEM file of extra CAs to trust for TLS. The file
	// caBundle of CredentialsDir (or Keys.CABundle) adds more.
	CABundle string
	// CredentialsDir holds files named accessKeyID, secretAccessKey and
	// optionally sessionToken (a Kubernetes Secret mounted as a volume).
	// Empty means the standard AWS_* environment variables, and no
	// credentials at all (anonymous) when those are unset too.
	CredentialsDir string
	// Keys, when set, are used instead of CredentialsDir and the
	// environment: credentials a CSI request carries in its secrets.
	Keys *Keys
	// MaxRetries bounds minio-go's retries of a failed request; 0 keeps its default.
	MaxRetries int
	// PartSize is the multipart part size Put uses for large objects.
	PartSize uint64
	// Concurrency is how many parts Put uploads in parallel.
	Concurrency uint
	// Observe, when set, is told of every request (metrics).
	Observe RequestObserver
	// NoBatching sends every small object in a request of its own, also
	// to MinIO (see batch.go).
	NoBatching bool
	// StallTimeout cuts an upload request that moves no byte for this
	// long (default DefaultStallTimeout).
	StallTimeout time.Duration
	// Logger gets what the store does on its own (batches it had to
	// split); nil means slog.Default().
	Logger *slog.Logger
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// NewClient builds a minio-go client for cfg.
func NewClient(cfg Config) (*minio.Client, error) {
	c, _, err := newClient(cfg, nil, nil)
	return c, err
}

// newClient also returns the transport of the client's ranged GETs when
// their bodies can splice (a plain-HTTP endpoint reached without a proxy).
// Responses that worked clear h's problem, and one that says it comes
// from MinIO (its Server header) sets isMinIO; both may be nil.
func newClient(cfg Config, h *health, isMinIO *atomic.Bool) (*minio.Client, *rawGetTransport, error) {
	host, secure, err := ParseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, nil, err
	}
	tr, err := transport(secure, cfg)
	if err != nil {
		return nil, nil, err
	}
	creds, err := credentialsFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	var rt http.RoundTripper = tr
	var raw *rawGetTransport
	if !secure && !proxied(tr, host) {
		raw = newRawGetTransport(tr)
		rt = raw
	}
	rt = progressCounting{inner: rt}
	if cfg.Observe != nil || h != nil || isMinIO != nil {
		rt = observed{inner: rt, observe: cfg.Observe, health: h, isMinIO: isMinIO}
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Transport:    rt,
		Region:       cfg.Region,
		BucketLookup: lookup,
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("s3 client for %s: %w", cfg.Endpoint, err)
	}
	return c, raw, nil
}

// proxied reports whether requests to host go through a proxy.
func proxied(tr *http.Transport, host string) bool {
	if tr.Proxy == nil {
		return false
	}
	u, err := tr.Proxy(&http.Request{URL: &url.URL{Scheme: "http", Host: host}})
	return err != nil || u != nil
}

// ParseEndpoint splits an endpoint URL into host[:port] and whether it uses TLS.
func ParseEndpoint(endpoint string) (host string, secure bool, err error) {
	if endpoint == "" {
		return "", false, fmt.Errorf("no S3 endpoint given")
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, fmt.Errorf("endpoint %q is not a URL: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("endpoint %q: scheme must be http or https", endpoint)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("endpoint %q must be scheme://host[:port] with no path, query or user", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

func transport(secure bool, cfg Config) (*http.Transport, error) {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
		// S3 bodies are already compressed or incompressible; letting Go add
		// Accept-Encoding would break ranged reads' byte counts.
		DisableCompression: true,
		WriteBufferSize:    256 << 10,
		ReadBufferSize:     256 << 10,
	}
	if secure {
		c, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = c
	}
	return tr, nil
}

// Keys are S3 credentials held in memory. They are never logged.
type Keys struct {
	AccessKeyID, SecretAccessKey, SessionToken string
	// CABundle is PEM certificates of extra CAs to trust (CABundleFile).
	CABundle []byte
}

func credentialsFor(cfg Config) (*credentials.Credentials, error) {
	if k := cfg.Keys; k != nil {
		return credentials.NewStaticV4(k.AccessKeyID, k.SecretAccessKey, k.SessionToken), nil
	}
	dir := cfg.CredentialsDir
	if dir == "" {
		return credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{},
		}), nil
	}
	p := &fileProvider{dir: dir}
	// Read once now so a missing or unreadable Secret fails at start-up
	// with a clear message rather than as a signature error later.
	if _, err := p.read(); err != nil {
		return nil, err
	}
	return credentials.New(p), nil
}
