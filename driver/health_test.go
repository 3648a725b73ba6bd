package driver_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/test/miniotest"
)

// podEvents records the node's Events as the API would get them.
type podEvents struct {
	mu   sync.Mutex
	list []podEvent
}

type podEvent struct {
	targets                    []string
	eventType, reason, message string
}

func (e *podEvents) Tell(_ context.Context, targets []string, eventType, reason, message string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, podEvent{targets, eventType, reason, message})
	return nil
}

// with returns the Events of reason.
func (e *podEvents) with(reason string) []podEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []podEvent
	for _, ev := range e.list {
		if ev.reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// While S3 refuses a mount's keys, every request through it fails with
// EACCES, and a file closed asynchronously is lost without its writer
// knowing. The node tells the pods using the volume, once each: the
// refusal with what to fix, the lost file by name, and the recovery; and
// reports the volume abnormal meanwhile.
func TestS3ProblemsAreToldToPods(t *testing.T) {
	events := &podEvents{}
	env := csitest.Start(t, csitest.Options{ReconcileEvery: 500 * time.Millisecond, Events: events})
	ctx := context.Background()
	staging := filepath.Join(env.Dir, "staging")
	target := filepath.Join(env.Dir, "pods", "a", "mount")
	id, vctx := publishedVolumeWith(t, env, "pvc-health", map[string]string{"asyncClose": "true"}, staging, map[string]bool{target: false})
	condition := func() *csi.VolumeCondition {
		r, err := env.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return r.GetVolumeCondition()
	}
	fsync := func(name, content string) error {
		f, err := os.Create(filepath.Join(target, name))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(content); err != nil {
			return err
		}
		return f.Sync()
	}
	if err := fsync("before.txt", "stored\n"); err != nil {
		t.Fatal(err)
	}
	if c := condition(); c.GetAbnormal() {
		t.Fatalf("abnormal before anything went wrong: %s", c.GetMessage())
	}

	f, err := os.Create(filepath.Join(target, "lost.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("never stored\n"); err != nil {
		t.Fatal(err)
	}
	env.MinIO.RestartWithCredentials("rotated-away", "rotated-away-secret")
	// close(2) returns before the upload: nothing tells this writer.
	if err := f.Close(); err != nil {
		t.Fatalf("asynchronous close: %v", err)
	}
	poll(t, 20*time.Second, "the lost upload and the refused keys told to the pod", func() bool {
		return len(events.with("ObjfuseUploadFailed")) > 0 && len(events.with("ObjfuseS3Problem")) > 0
	})
	lost := events.with("ObjfuseUploadFailed")[0]
	if lost.eventType != corev1.EventTypeWarning || !strings.Contains(lost.message, "lost.txt") || !strings.Contains(lost.message, "1 file(s)") {
		t.Fatalf("lost-upload Event: %+v", lost)
	}
	problem := events.with("ObjfuseS3Problem")[0]
	for _, want := range []string{id, "InvalidAccessKeyId", "controller-publish-secret-name", "EACCES"} {
		if !strings.Contains(problem.message, want) {
			t.Fatalf("problem Event does not say %q: %s", want, problem.message)
		}
	}
	if problem.eventType != corev1.EventTypeWarning || len(problem.targets) != 1 || problem.targets[0] != target {
		t.Fatalf("problem Event: %+v", problem)
	}
	if c := condition(); !c.GetAbnormal() || !strings.Contains(c.GetMessage(), "InvalidAccessKeyId") {
		t.Fatalf("volume condition while the keys are refused: %+v", c)
	}
	// More refused requests are the same problem, not news.
	if _, err := os.Stat(filepath.Join(target, "never-listed.txt")); err == nil {
		t.Fatal("stat worked with refused keys")
	}
	// A pod that starts using the volume now is told too, and only it.
	later := filepath.Join(env.Dir, "pods", "b", "mount")
	if _, err := env.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: later, VolumeCapability: mountCap()[0], VolumeContext: vctx,
	}); err != nil {
		t.Fatal(err)
	}
	poll(t, 20*time.Second, "the problem told to the pod that came later", func() bool {
		for _, ev := range events.with("ObjfuseS3Problem") {
			if len(ev.targets) == 1 && ev.targets[0] == later {
				return true
			}
		}
		return false
	})

	env.MinIO.RestartWithCredentials(miniotest.AccessKey, miniotest.SecretKey)
	if err := fsync("after.txt", "stored again\n"); err != nil {
		t.Fatalf("write once the keys work again: %v", err)
	}
	poll(t, 20*time.Second, "the recovery told to the pod and the volume normal again", func() bool {
		return len(events.with("ObjfuseS3Recovered")) > 0 && !condition().GetAbnormal()
	})
	// Told once each. (The store's own probe may catch MinIO restarting
	// with the right keys: a problem of another kind.)
	refused := map[string]int{}
	for _, ev := range events.with("ObjfuseS3Problem") {
		if strings.Contains(ev.message, "InvalidAccessKeyId") {
			for _, tg := range ev.targets {
				refused[tg]++
			}
		}
	}
	if refused[target] != 1 || refused[later] != 1 || len(refused) != 2 {
		t.Errorf("the refused keys were told %v times, want once to each pod", refused)
	}
	if n := len(events.with("ObjfuseUploadFailed")); n != 1 {
		t.Errorf("the lost upload was told %d times", n)
	}
	if n := len(events.with("ObjfuseS3Recovered")); n != 1 {
		t.Errorf("the recovery was told %d times", n)
	}
	for name, want := range map[string]string{"before.txt": "stored\n", "after.txt": "stored again\n"} {
		if got := objectContent(t, env, vctx["bucket"], name); got != want {
			t.Errorf("%s in S3: %q, want %q", name, got, want)
		}
	}
}

// objectContent is what S3 holds under key, read with the server's keys.
func objectContent(t *testing.T, env *csitest.Env, bucket, key string) string {
	t.Helper()
	obj, err := env.MinIO.Client().GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read %s from S3: %v", key, err)
	}
	return string(b)
}
