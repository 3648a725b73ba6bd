package processlauncher_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/test/miniotest"
	"github.com/objfuse/objfuse/test/processlauncher"
	"github.com/objfuse/objfuse/volume"
)

// A process mounter runs as nobody, becomes ready on its socket, reports
// why it cannot start, and is gone after Stop.
func TestProcessLauncher(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	dir, _ := os.MkdirTemp("", "launcher-")
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &processlauncher.Process{
		Binary: csitest.MounterBinary(t), KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"),
		NodeID: "n1", Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Logger: slog.Default(),
	}
	t.Cleanup(p.Close)
	v := volume.Volume{ID: volume.ID{S3: volume.S3{Endpoint: srv.Endpoint, Region: "us-east-1", PathStyle: true}, Bucket: bucket}}
	good := map[string][]byte{s3store.AccessKeyFile: []byte(miniotest.AccessKey), s3store.SecretKeyFile: []byte(miniotest.SecretKey)}
	bad := map[string][]byte{s3store.AccessKeyFile: []byte("who"), s3store.SecretKeyFile: []byte("nope")}
	ctx := context.Background()

	t.Run("bad credentials", func(t *testing.T) {
		m := spec.Mounter{VolumeID: "vol-bad", NodeID: "n1", Volume: v}
		_, err := p.Launch(ctx, m, bad)
		if !errors.Is(err, lifecycle.ErrFailed) || !strings.Contains(err.Error(), "InvalidAccessKeyId") {
			t.Fatalf("launch with bad credentials: %v", err)
		}
	})
	t.Run("ready, as nobody, and stopped", func(t *testing.T) {
		m := spec.Mounter{VolumeID: "vol-good", NodeID: "n1", Volume: v}
		uid, err := p.Launch(ctx, m, good)
		if err != nil {
			t.Fatal(err)
		}
		socket, err := spec.SocketOnNode(p.KubeletDir, uid)
		if err != nil {
			t.Fatal(err)
		}
		if err := handoff.Probe(ctx, socket); err != nil {
			t.Fatalf("probe: %v", err)
		}
		st, err := os.Stat(filepath.Join("/proc", itoa(p.PID(m))))
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Fatalf("mounter does not run as nobody: %v", err)
		}
		if again, err := p.Launch(ctx, m, good); err != nil || again != uid {
			t.Fatalf("second launch: %q, %v; want the same mounter %q", again, err, uid)
		}
		ro := m
		ro.ReadOnly = true
		if _, err := p.Launch(ctx, ro, good); !errors.Is(err, lifecycle.ErrIncompatible) {
			t.Fatalf("read-only launch over a read-write mounter: %v", err)
		}
		if err := p.Stop(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(socket); !os.IsNotExist(err) {
			t.Fatalf("socket left after Stop: %v", err)
		}
		if err := p.Stop(ctx, m); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
