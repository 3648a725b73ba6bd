// Package versitytest starts a real Versity S3 Gateway (versitygw, posix
// backend) for tests: an S3 server other than MinIO, which lists objects
// without their metadata as AWS S3 does. Like miniotest, a test that needs
// it fails when it is missing; it is never skipped.
package versitytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/localserver"
)

// Version is the versitygw .ci/run installs.
const Version = "v1.8.0"

// Fixed test credentials, written to a credentials directory.
const (
	AccessKey = "objfuse-test"
	SecretKey = "objfuse-test-secret"
)

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://host:port
	CredsDir string // holds accessKeyID and secretAccessKey files
}

// Binary finds versitygw: $VERSITYGW_BIN, $PATH, then $GOPATH/bin.
func Binary() (string, error) {
	return localserver.Binary("versitygw", "VERSITYGW_BIN", "github.com/versity/versitygw/cmd/versitygw@"+Version)
}

// StartShared starts a server outside any one test (for TestMain-scoped
// use) in a temporary directory; stop kills it and removes the directory.
func StartShared() (s *Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "versitytest-")
	if err != nil {
		return nil, nil, err
	}
	s, kill, err := start(dir)
	// The port was free when picked; another process may have taken it
	// before versitygw bound it.
	for attempt := 2; errors.Is(err, localserver.ErrExited) && attempt <= 3; attempt++ {
		s, kill, err = start(dir)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() { kill(); os.RemoveAll(dir) }, nil
}

func start(dir string) (*Server, func(), error) {
	bin, err := Binary()
	if err != nil {
		return nil, nil, err
	}
	root := filepath.Join(dir, "root")
	s := &Server{CredsDir: filepath.Join(dir, "creds")}
	for _, d := range []string{root, s.CredsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, err
		}
	}
	for name, v := range map[string]string{s3store.AccessKeyFile: AccessKey, s3store.SecretKeyFile: SecretKey} {
		if err := os.WriteFile(filepath.Join(s.CredsDir, name), []byte(v), 0o600); err != nil {
			return nil, nil, err
		}
	}
	addr, err := localserver.FreeAddr()
	if err != nil {
		return nil, nil, err
	}
	s.Endpoint = "http://" + addr
	cmd := exec.Command(bin, "--port", addr, "posix", root)
	// The server's own root credentials, in its own environment.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+AccessKey, "ROOT_SECRET_KEY="+SecretKey)
	cmd.Stderr = os.Stderr // its stdout is a line per request
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	if err := s.waitReady(exited); err != nil {
		stop()
		return nil, nil, err
	}
	return s, stop, nil
}

// waitReady waits until the server answers signed requests.
func (s *Server) waitReady(exited chan struct{}) error {
	root, err := s3store.NewClient(s.Config())
	if err != nil {
		return err
	}
	cfg := s.Config()
	cfg.CredentialsDir, cfg.Keys = "", &s3store.Keys{AccessKeyID: localserver.StrangerAccessKey, SecretAccessKey: localserver.StrangerSecretKey}
	stranger, err := s3store.NewClient(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := localserver.WaitServing(ctx, root, stranger, exited); err != nil {
		return fmt.Errorf("versitygw at %s: %w", s.Endpoint, err)
	}
	return nil
}

// MakeBucket creates a bucket.
func (s *Server) MakeBucket(name string) error {
	c, err := s3store.NewClient(s.Config())
	if err != nil {
		return err
	}
	if err := c.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("make bucket %s on versitygw: %w", name, err)
	}
	return nil
}

var bucketSeq atomic.Int64

// NewBucket creates a bucket for one test and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test-%d-%d", time.Now().UnixNano()%1e9, bucketSeq.Add(1))
	if err := s.MakeBucket(name); err != nil {
		t.Fatal(err)
	}
	return name
}

// Config is an s3store configuration for this server.
func (s *Server) Config() s3store.Config {
	return s3store.Config{Endpoint: s.Endpoint, Region: "us-east-1", PathStyle: true, CredentialsDir: s.CredsDir, MaxRetries: 2}
}
