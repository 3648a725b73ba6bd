//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A PVC's size is a quota: a pod writing 80 MiB into a 64 MiB PVC gets
// ENOSPC after 64 MiB, and df shows 64 MiB; once the PVC is patched to
// 128 MiB (csi-resizer, ControllerExpandVolume, kubelet's
// NodeExpandVolume), the same pod, not restarted, writes on and df shows
// the new size.
func TestAPVCsSizeIsItsQuota(t *testing.T) {
	s := newSuite(t)
	s.pvcOfSize("sized", scBucket, corev1.ReadWriteMany, "64Mi")
	pv := s.boundPV("sized")
	bucket, prefix := volume(pv)
	s.pod("writer", "sized", "sleep 3600", podOpts{})
	s.waitPod("writer", corev1.PodRunning, 3*time.Minute)
	sh := func(script string) string {
		out, err := s.exec(s.ns, "writer", "c", "/bin/sh", "-c", script)
		if err != nil && !strings.Contains(out, "rc=") {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return out
	}
	// -P: one line per filesystem, however long its name.
	dfKiB := func() string { return strings.TrimSpace(sh("df -P -k /data | tail -1 | awk '{print $2}'")) }
	if got := dfKiB(); got != "65536" {
		t.Fatalf("df in the pod: %s KiB, want the PVC's 64 MiB (65536)", got)
	}

	out := sh("dd if=/dev/zero of=/data/big bs=1M count=80 2>&1; echo rc=$?; stat -c size=%s /data/big")
	if !strings.Contains(out, "No space left on device") || !strings.Contains(out, "rc=1") || !strings.Contains(out, fmt.Sprintf("size=%d", 64<<20)) {
		t.Fatalf("writing 80 MiB into 64 MiB:\n%s\nwant ENOSPC after exactly 64 MiB", out)
	}
	o, err := s.s3.StatObject(s.ctx(), bucket, prefix+"big", minio.StatObjectOptions{})
	if err != nil || o.Size != 64<<20 {
		t.Fatalf("the object after ENOSPC: %d bytes, %v; want the 64 MiB written", o.Size, err)
	}

	pvc, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx(), "sized", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("128Mi")
	if _, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Update(s.ctx(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("expand the PVC: %v", err)
	}
	start := time.Now()
	s.eventually(3*time.Minute, "the PVC's status to say 128Mi, with no condition left", func() (bool, error) {
		p, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx(), "sized", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := p.Status.Capacity[corev1.ResourceStorage]
		return c.Cmp(resource.MustParse("128Mi")) == 0 && len(p.Status.Conditions) == 0, fmt.Errorf("capacity %s, conditions %v", c.String(), p.Status.Conditions)
	})
	t.Logf("expansion took %s", time.Since(start).Round(time.Second))
	if got := dfKiB(); got != "131072" {
		t.Fatalf("df in the pod after the expansion: %s KiB, want 128 MiB (131072)", got)
	}
	if out := sh("dd if=/dev/zero of=/data/more bs=1M count=40 2>&1; echo rc=$?"); !strings.Contains(out, "rc=0") {
		t.Fatalf("writing 40 MiB more after the expansion, in the same pod:\n%s", out)
	}
}
