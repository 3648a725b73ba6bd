package driver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/test/csitest"
)

// poll calls cond until it holds, failing the test at the deadline.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		<-tick.C
	}
	return time.Since(start)
}

// The whole life of a volume on a node, with its mounter killed in the
// middle: the node reports the volume abnormal, repairs the mount at the
// staging path and every target within 30 s, and nothing is lost.
func TestMounterKilledIsRepaired(t *testing.T) {
	env := csitest.Start(t, csitest.Options{ReconcileEvery: 3 * time.Second})
	ctx := context.Background()
	staging := filepath.Join(env.Dir, "staging")
	rw, ro := filepath.Join(env.Dir, "pods", "a", "mount"), filepath.Join(env.Dir, "pods", "b", "mount")
	id, vctx := publishedVolume(t, env, "pvc-repair", staging, map[string]bool{rw: false, ro: true})
	before := bytes.Repeat([]byte("written before the crash\n"), 1000)
	if err := os.WriteFile(filepath.Join(rw, "before.txt"), before, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "nope.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the read-only target: %v, want EROFS", err)
	}

	m := spec.Mounter{VolumeID: id, NodeID: csitest.NodeID}
	pid := env.Launcher.PID(m)
	if pid == 0 {
		t.Fatal("no mounter process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stats := func(path string) *csi.NodeGetVolumeStatsResponse {
		r, err := env.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return r
	}
	poll(t, 10*time.Second, "volume reported abnormal after the mounter died", func() bool {
		return stats(rw).GetVolumeCondition().GetAbnormal()
	})
	took := poll(t, 30*time.Second, "mount repaired at every path", func() bool {
		for _, p := range []string{rw, ro, staging} {
			b, err := os.ReadFile(filepath.Join(p, "before.txt"))
			if err != nil || !bytes.Equal(b, before) {
				return false
			}
		}
		return !stats(rw).GetVolumeCondition().GetAbnormal()
	})
	t.Logf("repaired %s after the mounter was killed (pid %d → %d)", took, pid, env.Launcher.PID(m))
	if env.Launcher.PID(m) == pid {
		t.Fatal("the same mounter process still serves")
	}
	checkReadahead(t, staging)
	after := []byte("written after the repair\n")
	if err := os.WriteFile(filepath.Join(rw, "after.txt"), after, 0o644); err != nil {
		t.Fatalf("write after repair: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ro, "nope.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("read-only target is writable after repair: %v", err)
	}
	bucket := vctx["bucket"]
	obj, err := env.MinIO.Client().GetObject(ctx, bucket, "after.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, after) {
		t.Fatalf("after.txt in S3: %q, %v", got, err)
	}

	// Tear down as kubelet and the attacher would; nothing is left.
	for _, target := range []string{rw, ro} {
		if _, err := env.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: csitest.NodeID}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: env.Secrets}); err != nil {
		t.Fatal(err)
	}
	if ok, err := env.MinIO.Client().BucketExists(ctx, bucket); err != nil || ok {
		t.Fatalf("bucket %s still exists after DeleteVolume (%v)", bucket, err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), env.Dir) {
		t.Fatalf("mounts left under %s", env.Dir)
	}
	if pid := env.Launcher.PID(m); pid != 0 {
		t.Fatalf("mounter %d still running after unpublish", pid)
	}
}

// A mounter that stops answering (SIGSTOP) hangs its mount: the node
// reports it abnormal and aborts the connection, so that nothing waits on
// it forever; once the mounter runs again it exits, is restarted, and the
// volume is mounted again.
func TestHungMountIsAbortedAndRepaired(t *testing.T) {
	env := csitest.Start(t, csitest.Options{ReconcileEvery: time.Second})
	ctx := context.Background()
	staging, target := filepath.Join(env.Dir, "staging"), filepath.Join(env.Dir, "target")
	id, _ := publishedVolume(t, env, "pvc-hung", staging, map[string]bool{target: false})
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := spec.Mounter{VolumeID: id, NodeID: csitest.NodeID}
	pid := env.Launcher.PID(m)
	syscall.Kill(pid, syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	poll(t, 20*time.Second, "hung volume reported abnormal", func() bool {
		r, err := env.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		return err == nil && r.GetVolumeCondition().GetAbnormal()
	})
	// Aborted: a stat answers at once with an error instead of hanging.
	poll(t, 20*time.Second, "hung connection aborted", func() bool {
		done := make(chan error, 1)
		go func() { _, err := os.Stat(filepath.Join(target, "f")); done <- err }()
		select {
		case err := <-done:
			return err != nil
		case <-time.After(500 * time.Millisecond):
			return false
		}
	})
	syscall.Kill(pid, syscall.SIGCONT)
	took := poll(t, 30*time.Second, "mount repaired", func() bool {
		b, err := os.ReadFile(filepath.Join(target, "f"))
		return err == nil && string(b) == "kept"
	})
	t.Logf("repaired %s after the mounter resumed", took)
}

// publishedVolume takes a new volume through CreateVolume,
// ControllerPublish, NodeStage at staging and NodePublish at each target
// (read-only where the map says), as Kubernetes would.
func publishedVolume(t *testing.T, env *csitest.Env, name, staging string, targets map[string]bool) (id string, vctx map[string]string) {
	t.Helper()
	return publishedVolumeWith(t, env, name, nil, staging, targets)
}

// publishedVolumeWith is publishedVolume of a StorageClass with params.
func publishedVolumeWith(t *testing.T, env *csitest.Env, name string, params map[string]string, staging string, targets map[string]bool) (id string, vctx map[string]string) {
	t.Helper()
	return publishedVolumeOf(t, env, &csi.CreateVolumeRequest{Name: name, Parameters: params}, staging, targets)
}

// publishedVolumeOf is publishedVolume of the volume req asks for.
func publishedVolumeOf(t *testing.T, env *csitest.Env, req *csi.CreateVolumeRequest, staging string, targets map[string]bool) (id string, vctx map[string]string) {
	t.Helper()
	ctx := context.Background()
	capRW := mountCap()[0]
	req.VolumeCapabilities, req.Secrets = mountCap(), env.Secrets
	vol, err := env.Controller.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	id, vctx = vol.GetVolume().GetVolumeId(), vol.GetVolume().GetVolumeContext()
	pub, err := env.Controller.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: csitest.NodeID, VolumeCapability: capRW, VolumeContext: vctx, Secrets: env.Secrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: capRW, PublishContext: pub.GetPublishContext(), VolumeContext: vctx,
	}); err != nil {
		t.Fatal(err)
	}
	checkReadahead(t, staging)
	for target, ro := range targets {
		if _, err := env.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capRW,
			Readonly: ro, PublishContext: pub.GetPublishContext(), VolumeContext: vctx,
		}); err != nil {
			t.Fatal(err)
		}
	}
	return id, vctx
}

// checkReadahead: the node plugin raised the staged FUSE mount's kernel
// readahead from Linux's 128 KiB.
func checkReadahead(t *testing.T, staging string) {
	t.Helper()
	if kib, err := mounts.Readahead(staging); err != nil || kib != mounts.ReadaheadKiB {
		t.Fatalf("readahead of the mount at %s: %d KiB, %v; want %d", staging, kib, err, mounts.ReadaheadKiB)
	}
}
