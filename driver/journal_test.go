package driver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/test/csitest"
)

// Files closed with asyncClose while S3 holds their uploads back wait in
// the mounter's journal, and the volume's condition says so. The mounter
// is SIGKILLed (an OOM kill); restarted in its pod, it is handed the
// mount again by the node's repair, shows the files and uploads every one.
func TestAsyncClosesOutliveAKilledMounter(t *testing.T) {
	env := csitest.Start(t, csitest.Options{ReconcileEvery: time.Second})
	ctx := context.Background()
	var holding atomic.Bool
	front := env.MinIO.HoldingFront(t, func(r *http.Request) bool {
		// Object uploads: a path of bucket and key.
		return holding.Load() && r.Method == http.MethodPut && strings.Count(strings.Trim(r.URL.Path, "/"), "/") > 0
	})
	staging, target := filepath.Join(env.Dir, "staging"), filepath.Join(env.Dir, "pods", "a", "mount")
	id, vctx := publishedVolumeWith(t, env, "pvc-journal", map[string]string{"asyncClose": "true", "endpoint": front.Config.Endpoint},
		staging, map[string]bool{target: false})
	const files = 50
	content := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*37) }
	holding.Store(true)
	for i := range files {
		if err := os.WriteFile(filepath.Join(target, fmt.Sprintf("f%02d", i)), content(i), 0o644); err != nil {
			t.Fatalf("asynchronous close %d: %v", i, err)
		}
	}
	condition := func() *csi.VolumeCondition {
		r, err := env.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil {
			return nil
		}
		return r.GetVolumeCondition()
	}
	poll(t, 20*time.Second, "the pending files in the volume's condition", func() bool {
		c := condition()
		return c != nil && !c.GetAbnormal() && strings.Contains(c.GetMessage(), fmt.Sprintf("%d file(s)", files))
	})

	m := spec.Mounter{VolumeID: id, NodeID: csitest.NodeID}
	pid := env.Launcher.PID(m)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "a new mounter serving the volume", func() bool {
		c := condition()
		return env.Launcher.PID(m) != pid && c != nil && !c.GetAbnormal()
	})
	front.Release()
	bucket := vctx["bucket"]
	poll(t, 60*time.Second, "every file in S3", func() bool {
		for i := range files {
			obj, err := env.MinIO.Client().GetObject(ctx, bucket, fmt.Sprintf("f%02d", i), minio.GetObjectOptions{})
			if err != nil {
				return false
			}
			got, err := io.ReadAll(obj)
			obj.Close()
			if err != nil || !bytes.Equal(got, content(i)) {
				return false
			}
		}
		return true
	})
	poll(t, 20*time.Second, "nothing pending in the volume's condition", func() bool {
		c := condition()
		return c != nil && c.GetMessage() == "mounted and answering"
	})
	got, err := os.ReadFile(filepath.Join(target, "f07"))
	if err != nil || !bytes.Equal(got, content(7)) {
		t.Fatalf("f07 through the repaired mount: %d bytes, %v", len(got), err)
	}
}
