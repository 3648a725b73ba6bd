//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

var (
	snapshotClass = env("E2E_SNAPSHOT_CLASS", "objfuse-minio")
	snapshots     = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
)

// s3Requests reads MinIO's request counters by API (getobject,
// putobject, copyobject, ...), summed over its servers.
func (s *suite) s3Requests() map[string]float64 {
	s.t.Helper()
	resp, err := http.Get(s3Endpoint + "/minio/v2/metrics/cluster")
	if err != nil {
		s.t.Fatalf("MinIO's metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "minio_s3_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `api="`)
		api, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[api] += v
	}
	if len(out) == 0 {
		s.t.Fatalf("MinIO's metrics have no minio_s3_requests_total (MINIO_PROMETHEUS_AUTH_TYPE=public?)")
	}
	return out
}

// objectSums is every object of a volume (under prefix in bucket): size,
// mode and mtime metadata and the SHA-256 of its content, read through S3.
func (s *suite) objectSums(bucket, prefix string) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for o := range s.s3.ListObjects(s.ctx(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatal(o.Err)
		}
		st, err := s.s3.StatObject(s.ctx(), bucket, o.Key, minio.StatObjectOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		out[strings.TrimPrefix(o.Key, prefix)] = fmt.Sprintf("%d mode=%s mtime=%s %s", o.Size, st.UserMetadata["Mode"], st.UserMetadata["Mtime"], s.objectSum(bucket, o.Key))
	}
	return out
}

// A VolumeSnapshot of a PVC holding 2,000 files and one of 300 MiB, a PVC
// restored from it and a clone of the PVC: each holds the same objects,
// content, modes and mtimes (through S3), made by copies alone (MinIO's
// counters: CopyObject, no GET or PUT of the data), and what is written
// to one side later does not show on the other.
func TestSnapshotRestoreAndClone(t *testing.T) {
	s := newSuite(t)
	dyn, err := dynamic.NewForConfig(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.pvc("orig", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("orig")
	bucket, prefix := volume(pv)
	s.pod("writer", "orig", `set -e
for d in $(seq 0 19); do mkdir -p /data/d$d; done
for i in $(seq 1 2000); do echo "file $i" > /data/d$((i % 20))/f$i; done
chmod 600 /data/d1/*; touch -d '2021-02-03 04:05:06' /data/d2/*
head -c 314572800 /dev/urandom > /data/large.bin
echo written`, podOpts{})
	if out := s.waitPod("writer", corev1.PodSucceeded, 10*time.Minute); !strings.Contains(out, "written") {
		t.Fatalf("writer: %s", out)
	}
	want := s.objectSums(bucket, prefix)
	if len(want) < 2001 {
		t.Fatalf("the volume holds %d objects, want 2,001 and the directories' markers", len(want))
	}
	if strings.Contains(want["d1/f1"], "mode= ") || strings.Contains(want["d2/f2"], "mtime= ") {
		t.Fatalf("no mode or mtime metadata to compare: %q, %q", want["d1/f1"], want["d2/f2"])
	}

	before := s.s3Requests()
	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap"},
		"spec": map[string]any{
			"volumeSnapshotClassName": snapshotClass,
			"source":                  map[string]any{"persistentVolumeClaimName": "orig"},
		},
	}}
	if _, err := dyn.Resource(snapshots).Namespace(s.ns).Create(s.ctx(), snap, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the VolumeSnapshot: %v", err)
	}
	start := time.Now()
	s.eventually(10*time.Minute, "the VolumeSnapshot ready to use", func() (bool, error) {
		got, err := dyn.Resource(snapshots).Namespace(s.ns).Get(s.ctx(), "snap", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		msg, _, _ := unstructured.NestedString(got.Object, "status", "error", "message")
		return ready, fmt.Errorf("not ready: %s", msg)
	})
	took := time.Since(start).Round(time.Second)
	// MinIO refreshes the counters it publishes every few seconds.
	var after map[string]float64
	s.eventually(time.Minute, "MinIO's counters to show a CopyObject per object", func() (bool, error) {
		after = s.s3Requests()
		copies := after["copyobject"] - before["copyobject"]
		return copies >= 2001, fmt.Errorf("%.0f CopyObject requests", copies)
	})
	t.Logf("snapshot of 2,001 objects (300 MiB and 2,000 small) ready in %s; requests: %.0f copies, %.0f GETs, %.0f PUTs",
		took, after["copyobject"]-before["copyobject"], after["getobject"]-before["getobject"], after["putobject"]-before["putobject"])
	if gets := after["getobject"] - before["getobject"]; gets > 0 {
		t.Errorf("%.0f GetObject requests while the snapshot was taken: its data moved through a client", gets)
	}
	if puts := after["putobject"] - before["putobject"] + after["putobjectpart"] - before["putobjectpart"]; puts > 0 {
		t.Errorf("%.0f PutObject or part requests while the snapshot was taken: its data moved through a client", puts)
	}

	fromSnapshot := &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}
	fromPVC := &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "orig"}
	for _, c := range []struct {
		name string
		from *corev1.TypedLocalObjectReference
	}{{"restored", fromSnapshot}, {"clone", fromPVC}} {
		pvc, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx(), "orig", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.pvcFrom(c.name, *pvc.Spec.StorageClassName, c.from)
		b, p := volume(s.boundPV(c.name))
		got := s.objectSums(b, p)
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %s is %q, want %q", c.name, k, got[k], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s holds %d objects, the original %d", c.name, len(got), len(want))
		}
	}

	// The sides go their own ways.
	s.pod("change", "orig", "echo changed > /data/d0/f20; echo new > /data/only-in-orig", podOpts{})
	s.waitPod("change", corev1.PodSucceeded, 3*time.Minute)
	for _, other := range []string{"restored", "clone"} {
		s.pod("look-"+other, other, "cat /data/d0/f20; ls /data/only-in-orig 2>&1 || true; echo in-"+other+" > /data/only-in-"+other, podOpts{})
		if out := s.waitPod("look-"+other, corev1.PodSucceeded, 3*time.Minute); !strings.Contains(out, "file 20") || !strings.Contains(out, "No such file") {
			t.Fatalf("the %s volume after writes to the original:\n%s", other, out)
		}
		b, p := volume(s.boundPV(other))
		if got := s.objectText(b, p+"only-in-"+other); got != "in-"+other+"\n" {
			t.Fatalf("the file written to the %s volume holds %q in S3", other, got)
		}
		if _, err := s.s3.StatObject(s.ctx(), bucket, prefix+"only-in-"+other, minio.StatObjectOptions{}); err == nil {
			t.Fatalf("a file written to the %s volume shows in the original", other)
		}
	}
}

// pvcFrom makes a 1Gi PVC whose content comes from a snapshot or a PVC.
func (s *suite) pvcFrom(name, sc string, from *corev1.TypedLocalObjectReference) {
	s.t.Helper()
	pvc := s.pvcSpec(name, sc, corev1.ReadWriteMany, "1Gi")
	pvc.Spec.DataSource = from
	if _, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx(), pvc, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}
