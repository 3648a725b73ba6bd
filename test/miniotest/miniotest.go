// Package miniotest starts a real MinIO server for tests: on a free
// loopback port, with its own data directory and credentials, stopped when
// the test ends. Tests that need S3 use it; none are skipped for want of it.
package miniotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/localserver"
)

// Fixed test credentials, written to a credentials directory.
const (
	AccessKey = "objfuse-test"
	SecretKey = "objfuse-test-secret"
)

// Server is a running MinIO.
type Server struct {
	t        testing.TB
	bin      string
	dataDir  string
	Addr     string // host:port
	Endpoint string // http://host:port
	CredsDir string // holds accessKeyID and secretAccessKey files
	cmd      *exec.Cmd
	exited   chan struct{}
	tmpDir   string // removed by Close, for servers from StartShared
	certsDir string // MinIO's --certs-dir, for servers from StartTLS
	// Region is the server's region (MINIO_SITE_REGION), when not us-east-1.
	Region string
	// rootUser and rootPassword replace AccessKey and SecretKey after
	// RestartWithCredentials (CredsDir keeps the old ones).
	rootUser, rootPassword string
	// CA is the PEM certificate of the private CA that issued the
	// server's certificate (StartTLS); CredsDir holds it as caBundle.
	CA []byte
}

// Binary finds the minio binary: $MINIO_BIN, $PATH, then $GOPATH/bin.
func Binary() (string, error) {
	return localserver.Binary("minio", "MINIO_BIN", "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c")
}

// Start starts a MinIO server and stops it when t ends. It fails the test
// if MinIO is missing: tests that need S3 are never skipped.
func Start(t testing.TB) *Server {
	t.Helper()
	return startHTTP(t, "")
}

// StartInRegion starts a MinIO whose buckets are in region, which
// requests must be signed for; Config says so.
func StartInRegion(t testing.TB, region string) *Server {
	t.Helper()
	return startHTTP(t, region)
}

func startHTTP(t testing.TB, region string) *Server {
	t.Helper()
	s, _ := newServer(t)
	s.Region = region
	pick := func() {
		s.Addr = freeAddr(t)
		s.Endpoint = "http://" + s.Addr
	}
	pick()
	s.start(pick)
	t.Cleanup(s.Stop)
	return s
}

// newServer is a server not yet started, in a directory of t's (returned)
// with its data and a credentials directory holding the test keys.
func newServer(t testing.TB) (*Server, string) {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, dataDir: filepath.Join(dir, "data"), CredsDir: filepath.Join(dir, "creds")}
	if err := os.MkdirAll(s.CredsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.CredsDir, s3store.AccessKeyFile), AccessKey)
	writeFile(t, filepath.Join(s.CredsDir, s3store.SecretKeyFile), SecretKey)
	return s, dir
}

// StartTLS starts a MinIO serving HTTPS with a certificate from a private
// CA, which Config's credentials directory trusts (its caBundle file) and
// the system does not. The certificate names hosts, by default 127.0.0.1
// and localhost; Endpoint uses the first, and so does the listener when
// it is an IP address.
func StartTLS(t testing.TB, hosts ...string) *Server {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	certs, err := localserver.NewCertificates(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	s, dir := newServer(t)
	s.certsDir, s.CA = filepath.Join(dir, "certs"), certs.CA
	if err := os.MkdirAll(s.certsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.certsDir, "public.crt"), string(certs.Cert))
	writeFile(t, filepath.Join(s.certsDir, "private.key"), string(certs.Key))
	writeFile(t, filepath.Join(s.CredsDir, s3store.CABundleFile), string(certs.CA))
	// It listens where the endpoint points when that is an IP address
	// (one pods on the host network reach, in e2e tests), else on loopback.
	ip := "127.0.0.1"
	if net.ParseIP(hosts[0]) != nil {
		ip = hosts[0]
	}
	pick := func() {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		s.Addr = l.Addr().String()
		l.Close()
		_, port, _ := net.SplitHostPort(s.Addr)
		s.Endpoint = "https://" + net.JoinHostPort(hosts[0], port)
	}
	pick()
	s.start(pick)
	t.Cleanup(s.Stop)
	return s
}

func writeFile(t testing.TB, path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t testing.TB) string {
	addr, err := localserver.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startAttempts bounds the starts of a server that exits at once: its
// ports were free when picked, and another process may have taken one
// before the server bound it.
const startAttempts = 3

// start starts the server and waits until it serves. repick, when not
// nil, picks the server's address anew before another attempt; nil keeps
// it (a restart must keep its endpoint), and the port is tried again.
func (s *Server) start(repick func()) {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		err := s.launch()
		if err == nil {
			return
		}
		if !errors.Is(err, localserver.ErrExited) || attempt == startAttempts {
			s.t.Fatalf("minio at %s: %v", s.Endpoint, err)
		}
		if repick != nil {
			repick()
		}
	}
}

// launch starts the process once and waits until it serves.
func (s *Server) launch() error {
	args := []string{"server", "--quiet", "--address", s.Addr, "--console-address", freeAddr(s.t)}
	if s.certsDir != "" {
		args = append(args, "--certs-dir", s.certsDir)
	}
	cmd := exec.Command(s.bin, append(args, s.dataDir)...)
	// MinIO takes its root credentials from the environment; this is the
	// test server's own process, not objfuse.
	user, password := AccessKey, SecretKey
	if s.rootUser != "" {
		user, password = s.rootUser, s.rootPassword
	}
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+password,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=on")
	if s.Region != "" {
		cmd.Env = append(cmd.Env, "MINIO_SITE_REGION="+s.Region)
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start minio: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root, stranger := s.Client(), s.clientWith(localserver.StrangerAccessKey, localserver.StrangerSecretKey)
	if err := localserver.WaitServing(ctx, root, stranger, s.exited); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Stop kills the server (as a crash would) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Close stops the server and removes what StartShared created.
func (s *Server) Close() {
	s.Stop()
	if s.tmpDir != "" {
		os.RemoveAll(s.tmpDir)
	}
}

// Restart starts the server again on the same address and data.
func (s *Server) Restart() {
	s.Stop()
	s.start(nil)
}

// RestartWithCredentials restarts the server with other root
// credentials, as a rotation of keys does: the old ones stop working.
// CredsDir and Config keep the old ones; Client uses the new.
func (s *Server) RestartWithCredentials(accessKey, secretKey string) {
	s.rootUser, s.rootPassword = accessKey, secretKey
	s.Restart()
}

// Config is an s3store configuration for this server.
func (s *Server) Config() s3store.Config {
	region := "us-east-1"
	if s.Region != "" {
		region = s.Region
	}
	return s3store.Config{Endpoint: s.Endpoint, Region: region, PathStyle: true, CredentialsDir: s.CredsDir, MaxRetries: 2}
}

// Client is a raw minio-go client, for checking what is really stored.
func (s *Server) Client() *minio.Client {
	if s.rootUser != "" {
		return s.clientWith(s.rootUser, s.rootPassword)
	}
	return s.clientWith(AccessKey, SecretKey)
}

// clientWith is a raw minio-go client signing with the given keys.
func (s *Server) clientWith(accessKey, secretKey string) *minio.Client {
	cfg := s.Config()
	cfg.CredentialsDir, cfg.Keys = "", &s3store.Keys{AccessKeyID: accessKey, SecretAccessKey: secretKey, CABundle: s.CA}
	c, err := s3store.NewClient(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

var bucketSeq atomic.Int64

// Bucket creates a new empty bucket and returns its name.
func (s *Server) Bucket() string {
	s.t.Helper()
	name := "test-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-" + strconv.FormatInt(bucketSeq.Add(1), 10)
	if err := s.Client().MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		s.t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}

// StartShared starts a server outside any one test (for TestMain-scoped
// use); it returns nil if MinIO cannot start, and the caller stops it.
func StartShared() *Server {
	dir, err := os.MkdirTemp("", "miniotest-")
	if err != nil {
		return nil
	}
	r := &recorder{}
	s := &Server{t: r, dataDir: filepath.Join(dir, "data"), CredsDir: filepath.Join(dir, "creds"), tmpDir: dir}
	if s.bin, err = Binary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil
	}
	os.MkdirAll(s.CredsDir, 0o700)
	os.WriteFile(filepath.Join(s.CredsDir, s3store.AccessKeyFile), []byte(AccessKey), 0o600)
	os.WriteFile(filepath.Join(s.CredsDir, s3store.SecretKeyFile), []byte(SecretKey), 0o600)
	pick := func() {
		s.Addr = freeAddr(r)
		s.Endpoint = "http://" + s.Addr
	}
	pick()
	func() {
		defer func() { recover() }()
		s.start(pick)
	}()
	if r.failed {
		return nil
	}
	return s
}

// NewBucket creates a bucket for one test, reporting failure to t.
func (s *Server) NewBucket(t testing.TB) string {
	old := s.t
	s.t = t
	defer func() { s.t = old }()
	return s.Bucket()
}

// recorder is a testing.TB for servers that outlive a single test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	r.failed = true
	panic("miniotest: fatal")
}
func (r *recorder) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	r.failed = true
	panic("miniotest: fatal")
}
func (r *recorder) TempDir() string { d, _ := os.MkdirTemp("", "miniotest-"); return d }
func (r *recorder) Cleanup(func())  {}
