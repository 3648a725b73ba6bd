package s3store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CABundleFile is the optional file of a credentials directory (and key
// of the credentials Secret) holding the PEM certificates of extra CAs to
// trust for the endpoint: a private CA, such as an in-cluster MinIO's.
// It travels with the credentials so that every part that talks to the
// endpoint (controller and mounter pods) trusts the same CAs. Unlike the
// keys, it is read when the store is made: a new CA reaches a running
// mounter when its pod is restarted.
const CABundleFile = "caBundle"

// tlsConfig is what an https endpoint's certificate is checked against:
// the system's roots plus cfg's extra CAs.
func tlsConfig(cfg Config) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	bundles, err := caBundles(cfg)
	if err != nil {
		return nil, err
	}
	if len(bundles) == 0 {
		return c, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, b := range bundles {
		if !pool.AppendCertsFromPEM(b.pem) {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificates", b.from)
		}
	}
	c.RootCAs = pool
	return c, nil
}

type caBundle struct {
	from string // for messages
	pem  []byte
}

// caBundles are cfg's extra CAs: the file it names, and the bundle that
// comes with its credentials (in memory, or in the credentials directory).
func caBundles(cfg Config) ([]caBundle, error) {
	var out []caBundle
	if cfg.CABundle != "" {
		b, err := os.ReadFile(cfg.CABundle)
		if err != nil {
			return nil, fmt.Errorf("read CA bundle: %w", err)
		}
		out = append(out, caBundle{cfg.CABundle, b})
	}
	switch {
	case cfg.Keys != nil:
		if len(cfg.Keys.CABundle) > 0 {
			out = append(out, caBundle{"in the Secret's key " + CABundleFile, cfg.Keys.CABundle})
		}
	case cfg.CredentialsDir != "":
		path := filepath.Join(cfg.CredentialsDir, CABundleFile)
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			out = append(out, caBundle{path, b})
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("read CA bundle: %w", err)
		}
	}
	return out, nil
}

// ExplainTLS says what is wrong, and what to do about it, when err is a
// failed TLS handshake with endpoint, or one side spoke TLS and the other
// plain HTTP; ok is false for any other error.
// A certificate nobody trusts is the usual first mistake with a private
// S3 server, and Go's own message does not say where the fix goes.
func ExplainTLS(err error, endpoint string) (msg string, ok bool) {
	var (
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		issuer := "an unknown issuer"
		if unknown.Cert != nil {
			issuer = fmt.Sprintf("%q", unknown.Cert.Issuer.String())
		}
		return fmt.Sprintf("S3 endpoint %s presents a TLS certificate issued by %s, which is not a trusted CA: "+
			"put that CA's certificate (PEM) in the credentials Secret under the key %q, or start the driver with --ca-bundle "+
			"(objfuse-mount: a %s file in --credentials-dir, or --ca-bundle)", endpoint, issuer, CABundleFile, CABundleFile), true
	case errors.As(err, &host):
		return fmt.Sprintf("S3 endpoint %s presents a TLS certificate for %s, not for %s: use an endpoint name the certificate covers",
			endpoint, certNames(host.Certificate), host.Host), true
	case errors.As(err, &invalid):
		return fmt.Sprintf("S3 endpoint %s presents a TLS certificate that is not valid: %v", endpoint, invalid), true
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("S3 endpoint %s does not answer in TLS: if the server serves plain HTTP, write the endpoint as http://", endpoint), true
	case strings.Contains(err.Error(), "HTTP request to an HTTPS server"):
		// Go's HTTPS servers (MinIO among them) answer plain HTTP so.
		return fmt.Sprintf("S3 endpoint %s serves HTTPS, not plain HTTP: write the endpoint as https://", endpoint), true
	}
	return "", false
}

// certNames lists the names a certificate covers, for messages.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "other names"
	}
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	if len(names) == 0 {
		return "no names"
	}
	return strings.Join(names, ", ")
}
