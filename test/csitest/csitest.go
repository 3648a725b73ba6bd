// Package csitest runs the objfuse CSI driver for tests the way it runs on
// one machine: controller and node in one process, mounters as supervised
// objfuse-mount processes running as nobody, over a real MinIO.
package csitest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/objfuse/objfuse/driver"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
	"github.com/objfuse/objfuse/test/processlauncher"
	"github.com/objfuse/objfuse/volume"
)

// NodeID is the one node of a test environment.
const NodeID = "objfuse-test-node"

// Options tune an environment.
type Options struct {
	// ReconcileEvery is the node's check interval (default 1s).
	ReconcileEvery time.Duration
	// TLS serves MinIO over HTTPS with a certificate from a private CA,
	// which Secrets carry (caBundle)...
	TLS bool
	// ...or, with DriverCABundle, the driver's --ca-bundle file instead.
	DriverCABundle bool
	// MinIORegion puts MinIO's buckets in a region other than us-east-1;
	// the driver's default region stays unset.
	MinIORegion string
	// Events receives the node's Events for pods (default: the log).
	Events driver.EventSink
	// DefaultCredentialsForVolumes lets requests without secrets use the
	// driver's own credentials (--s3-credentials-for-volumes).
	DefaultCredentialsForVolumes bool
	// MountTakeover keeps the volumes' FUSE connections in the node
	// (--mount-takeover; off by default here, where the repair tests
	// stand for a kernel that cannot resend).
	MountTakeover bool
}

// Env is a running driver.
type Env struct {
	Dir         string // world-traversable root of the test's files
	Endpoint    string // unix:// CSI endpoint
	SecretsFile string // csi-sanity secrets with the MinIO credentials
	MinIO       *miniotest.Server
	Driver      *driver.Driver
	Launcher    *processlauncher.Process
	Conn        *grpc.ClientConn
	Controller  csi.ControllerClient
	Node        csi.NodeClient
	// Secrets are the credentials as a CSI request carries them.
	Secrets map[string]string
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// MounterBinary builds objfuse-mount once per test binary into a directory
// nobody can read and execute.
func MounterBinary(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "objfuse-mount-bin-")
		if err != nil {
			buildErr = err
			return
		}
		os.Chmod(dir, 0o755)
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		binary = filepath.Join(dir, "objfuse-mount")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/objfuse-mount")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build objfuse-mount: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Start runs MinIO and the driver; everything stops when the test ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = time.Second
	}
	var srv *miniotest.Server
	switch {
	case o.TLS:
		srv = miniotest.StartTLS(t)
	case o.MinIORegion != "":
		srv = miniotest.StartInRegion(t, o.MinIORegion)
	default:
		srv = miniotest.Start(t)
	}
	bin := MounterBinary(t)
	dir, err := os.MkdirTemp("", "objfuse-csi-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	secrets := map[string]string{s3store.AccessKeyFile: miniotest.AccessKey, s3store.SecretKeyFile: miniotest.SecretKey}
	credsDir, caBundle := srv.CredsDir, ""
	switch {
	case o.TLS && o.DriverCABundle:
		caBundle = filepath.Join(dir, "ca.pem")
		credsDir = filepath.Join(dir, "creds")
		os.Mkdir(credsDir, 0o700)
		for name, v := range map[string]string{caBundle: string(srv.CA), filepath.Join(credsDir, s3store.AccessKeyFile): miniotest.AccessKey,
			filepath.Join(credsDir, s3store.SecretKeyFile): miniotest.SecretKey} {
			if err := os.WriteFile(name, []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	case o.TLS:
		secrets[s3store.CABundleFile] = string(srv.CA)
	}

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	proc := &processlauncher.Process{
		Binary: bin, KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "mounters"),
		NodeID: NodeID, Credential: nobody, Logger: log,
	}
	d, err := driver.New(driver.Options{
		Mode:                         driver.ModeAll,
		NodeID:                       NodeID,
		S3Defaults:                   volume.Defaults{Endpoint: srv.Endpoint, PathStyle: true},
		DefaultCredentialsDir:        credsDir,
		DefaultCredentialsForVolumes: o.DefaultCredentialsForVolumes,
		CABundle:                     caBundle,
		Launcher:                     proc,
		KubeletDir:                   filepath.Join(dir, "kubelet"),
		StateDir:                     filepath.Join(dir, "node"),
		ReconcileEvery:               o.ReconcileEvery,
		Events:                       o.Events,
		MounterWait:                  20 * time.Second,
		MountTakeover:                o.MountTakeover,
		Logger:                       log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(dir, "csi.sock")
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, "unix://"+sock) }()
	// Listening, not merely there: the socket file exists a moment before
	// the driver listens on it.
	tick := time.NewTicker(10 * time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver not listening on %s", sock)
		}
	}
	tick.Stop()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		<-served
		proc.Close()
		unmountUnder(dir)
	})

	secretsFile := filepath.Join(dir, "secrets.yaml")
	var yaml string
	for _, k := range []string{"CreateVolumeSecret", "DeleteVolumeSecret", "ControllerPublishVolumeSecret", "ControllerUnpublishVolumeSecret", "ControllerValidateVolumeCapabilitiesSecret", "NodeStageVolumeSecret", "NodePublishVolumeSecret", "ControllerExpandVolumeSecret", "CreateSnapshotSecret", "DeleteSnapshotSecret", "ListSnapshotsSecret"} {
		yaml += fmt.Sprintf("%s:\n  %s: %q\n  %s: %q\n", k, s3store.AccessKeyFile, miniotest.AccessKey, s3store.SecretKeyFile, miniotest.SecretKey)
	}
	if err := os.WriteFile(secretsFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return &Env{
		Dir: dir, Endpoint: "unix://" + sock, SecretsFile: secretsFile, MinIO: srv, Driver: d, Launcher: proc,
		Conn: conn, Controller: csi.NewControllerClient(conn), Node: csi.NewNodeClient(conn), Secrets: secrets,
	}
}

// unmountUnder detaches whatever a failed test left mounted under dir.
func unmountUnder(dir string) {
	out, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range splitLines(string(out)) {
		var a, b, c, d, mp string
		fmt.Sscan(line, &a, &b, &c, &d, &mp)
		if len(mp) > len(dir) && mp[:len(dir)] == dir {
			points = append(points, mp)
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b[:len(b)-1]))
	return len(b), nil
}

// SecretKey is the test MinIO's secret, for checks that it never leaks.
func SecretKey() string { return miniotest.SecretKey }
