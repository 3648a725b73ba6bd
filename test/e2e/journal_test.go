//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/test/miniotest"
)

// TestDeletedMounterNamesTheFilesItLost: with asyncClose, a pod's closes
// return once journaled on the mounter pod's emptyDir. The mounter pod
// is deleted while S3 does not take uploads (a proxy holds them): the
// emptyDir goes with the pod, so what it held is lost. The mounter
// drains for its grace period less 10 s, then reports the files it could
// not upload, and the node plugin tells the writing pod in an Event that
// names exactly those files.
func TestDeletedMounterNamesTheFilesItLost(t *testing.T) {
	s := newSuite(t)
	var holding atomic.Bool
	front := miniotest.HoldingFrontOf(t, hostAddr, s3Endpoint, func(r *http.Request) bool {
		// Object uploads: PUT or POST (multipart) to a bucket and key.
		upload := r.Method == http.MethodPut || r.Method == http.MethodPost
		return holding.Load() && upload && strings.Contains(strings.Trim(r.URL.Path, "/"), "/")
	})
	// The volume's id names the proxy as its endpoint: the namespace, and
	// the volume with it, must go while the proxy still serves.
	t.Cleanup(s.deleteNamespace)
	sc := s.storageClassVariant("journal", func(sc *storagev1.StorageClass) {
		sc.Parameters["endpoint"] = front.URL
		sc.Parameters["asyncClose"] = "true"
	})
	s.pvc("journal", sc, corev1.ReadWriteMany)
	pv := s.boundPV("journal")
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("lost-%d", i))
	}
	holding.Store(true)
	s.pod("writer", "journal", `set -e; for f in `+strings.Join(want, " ")+`; do echo "$f" > /data/$f; done; echo written; sleep 3600`, podOpts{})
	s.eventually(3*time.Minute, "the writer's closes to return", func() (bool, error) {
		return strings.Contains(s.logs("writer"), "written"), nil
	})
	if front.Held() == 0 {
		t.Fatal("no upload was held: the files may be in S3, and the test proves nothing")
	}
	old := s.mounterPodOf(pv.Spec.CSI.VolumeHandle)
	// Deleted with its own grace period: the mounter drains for it less
	// 10 s, then reports what it could not upload.
	if err := s.kc.CoreV1().Pods(driverNS).Delete(s.ctx(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(*old.Spec.TerminationGracePeriodSeconds) * time.Second
	// The uploads fail one by one at the drain deadline: a check of the
	// node plugin between two tells some in one Event, the rest in the next.
	var told []string
	s.eventually(grace+time.Minute, fmt.Sprintf("ObjfuseUploadFailed Events on the writer naming %d files", len(want)), func() (bool, error) {
		evs, err := s.kc.CoreV1().Events(s.ns).List(s.ctx(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Pod,involvedObject.name=writer,reason=ObjfuseUploadFailed",
		})
		if err != nil {
			return false, err
		}
		told = nil
		for _, e := range evs.Items {
			for range max(e.Count, 1) {
				told = append(told, namedFiles(e.Message)...)
			}
		}
		return len(told) >= len(want), fmt.Errorf("named so far: %q", told)
	})
	slices.Sort(told)
	if !slices.Equal(told, want) {
		t.Fatalf("the Events name %q as lost, want exactly %q, each once", told, want)
	}
	holding.Store(false)
	front.Release()
}

// namedFiles are the files an ObjfuseUploadFailed message names.
func namedFiles(message string) []string {
	_, list, ok := strings.Cut(message, "The files: ")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, ". ")
	return strings.Split(list, ", ")
}
