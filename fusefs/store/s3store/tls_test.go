package s3store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// credsDir writes a credentials directory with the test keys and, when
// ca is not nil, a caBundle.
func credsDir(t *testing.T, ca []byte) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{s3store.AccessKeyFile: []byte(miniotest.AccessKey), s3store.SecretKeyFile: []byte(miniotest.SecretKey)}
	if ca != nil {
		files[s3store.CABundleFile] = ca
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// An HTTPS endpoint whose certificate comes from a private CA works when
// the CA is given in any of the three places, and otherwise fails its
// check with a message that says where the CA goes.
func TestHTTPSEndpointTrust(t *testing.T) {
	srv := miniotest.StartTLS(t)
	bucket := srv.NewBucket(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, srv.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	base := func() s3store.Config {
		return s3store.Config{Endpoint: srv.Endpoint, Region: "us-east-1", PathStyle: true, MaxRetries: 1}
	}
	cases := []struct {
		name    string
		cfg     func(t *testing.T) s3store.Config
		wantErr []string // substrings; none means the check passes
	}{
		{"caBundle in the credentials directory", func(t *testing.T) s3store.Config {
			c := base()
			c.CredentialsDir = credsDir(t, srv.CA)
			return c
		}, nil},
		{"caBundle with in-memory keys", func(t *testing.T) s3store.Config {
			c := base()
			c.Keys = &s3store.Keys{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey, CABundle: srv.CA}
			return c
		}, nil},
		{"CA bundle file (--ca-bundle)", func(t *testing.T) s3store.Config {
			c := base()
			c.CredentialsDir = credsDir(t, nil)
			c.CABundle = caFile
			return c
		}, nil},
		{"no CA", func(t *testing.T) s3store.Config {
			c := base()
			c.CredentialsDir = credsDir(t, nil)
			return c
		}, []string{srv.Endpoint, "objfuse test CA", "not a trusted CA", `key "caBundle"`, "--ca-bundle"}},
		{"https to a plain-HTTP port", func(t *testing.T) s3store.Config {
			plain := miniotest.Start(t)
			c := plain.Config()
			c.Endpoint = strings.Replace(plain.Endpoint, "http://", "https://", 1)
			return c
		}, []string{"does not answer in TLS", "http://"}},
		{"http to an HTTPS port", func(t *testing.T) s3store.Config {
			c := base()
			c.Endpoint = strings.Replace(srv.Endpoint, "https://", "http://", 1)
			c.CredentialsDir = credsDir(t, nil)
			return c
		}, []string{"serves HTTPS", "https://"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := s3store.New(tc.cfg(t), bucket)
			if err != nil {
				t.Fatal(err)
			}
			err = st.Check(context.Background())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("check passed")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("error %v is not ErrUnavailable", err)
			}
		})
	}
}

// A certificate that does not cover the endpoint's host name is named as such.
func TestHTTPSEndpointHostNameMismatch(t *testing.T) {
	srv := miniotest.StartTLS(t, "localhost")
	cfg := srv.Config()
	cfg.Endpoint = "https://" + srv.Addr // 127.0.0.1, which the certificate does not name
	st, err := s3store.New(cfg, "any")
	if err != nil {
		t.Fatal(err)
	}
	err = st.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "TLS certificate for localhost, not for 127.0.0.1") {
		t.Fatalf("check: %v", err)
	}
}

// Bad bundles are refused when the store is built, naming where they came from.
func TestCABundleWithoutCertificates(t *testing.T) {
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  s3store.Config
		want string
	}{
		{"file", s3store.Config{Endpoint: "https://s3.example.com", CABundle: junk, Keys: &s3store.Keys{}}, junk + " holds no PEM certificates"},
		{"missing file", s3store.Config{Endpoint: "https://s3.example.com", CABundle: junk + ".gone", Keys: &s3store.Keys{}}, "read CA bundle"},
		{"keys", s3store.Config{Endpoint: "https://s3.example.com", Keys: &s3store.Keys{CABundle: []byte("junk")}}, `key caBundle holds no PEM certificates`},
		{"credentials directory", s3store.Config{Endpoint: "https://s3.example.com", CredentialsDir: credsDirWith(t, "junk")}, "caBundle holds no PEM certificates"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s3store.New(tc.cfg, "b")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

func credsDirWith(t *testing.T, ca string) string {
	return credsDir(t, []byte(ca))
}

// Objects written and read over HTTPS (no splicing there) come back whole:
// a multipart upload and ranged reads across its parts.
func TestHTTPSRoundTrip(t *testing.T) {
	srv := miniotest.StartTLS(t)
	cfg := srv.Config()
	cfg.PartSize = 5 << 20
	st, err := s3store.New(cfg, srv.NewBucket(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Splices() {
		t.Fatal("an HTTPS store claims to splice")
	}
	data := make([]byte, 12<<20+123)
	rand.Read(data)
	ctx := context.Background()
	if _, err := st.Put(ctx, "big", bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	for _, r := range []struct{ off, n int64 }{{0, -1}, {5<<20 - 7, 4096}, {int64(len(data)) - 100, 100}} {
		body, err := st.Get(ctx, "big", store.AnyVersion, r.off, r.n)
		if err != nil {
			t.Fatalf("get %d+%d: %v", r.off, r.n, err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		want := data[r.off:]
		if r.n >= 0 {
			want = want[:r.n]
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %d+%d: %d bytes (%v), want %d equal bytes", r.off, r.n, len(got), err, len(want))
		}
	}
}
