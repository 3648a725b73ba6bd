//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume/inline"
)

// The local overlay lets the pods of inlineNS declare inline volumes of
// inlineBucket under inlinePrefix (deploy/kustomize/local/inline.yaml and
// its allow-list in mounter-config-patch.yaml), with the Secret
// objfuse-minio of that namespace.
const (
	inlineNS     = "objfuse-e2e-inline"
	inlineBucket = "objfuse-inline"
	inlinePrefix = "allowed"
)

// A pod declares its bucket inline, with no PVC: in a namespace the
// admin's allow-list names, for a prefix the rule covers, the controller
// starts its mounter on the pod's node and the pod writes through the
// mount into S3; the mounter goes when the pod goes. A pod of a
// namespace the list does not name, or asking for a prefix its rule does
// not cover, gets an Event saying so, and no mounter.
func TestInlineVolumes(t *testing.T) {
	s := newSuite(t)
	ctx := s.ctx()
	endpoint := s.storageClassEndpoint(scBucket)
	if err := s.s3.MakeBucket(ctx, inlineBucket, minio.MakeBucketOptions{}); err != nil {
		if exists, _ := s.s3.BucketExists(ctx, inlineBucket); !exists {
			t.Fatal(err)
		}
	}
	in := *s
	in.ns = inlineNS
	t.Cleanup(func() {
		for _, p := range []string{"writer", "outside", "job"} {
			in.kc.CoreV1().Pods(inlineNS).Delete(ctx, p, metav1.DeleteOptions{})
		}
	})
	prefix := inlinePrefix + "/" + s.ns

	start := time.Now()
	writer := in.inlinePod("writer", endpoint, prefix, `set -e; head -c 4194304 /dev/urandom > /data/file.bin; echo "sum $(sha256sum /data/file.bin | cut -d' ' -f1)"; sleep 3600`)
	sum := in.awaitLog("writer", "sum ")
	t.Logf("the pod with an inline volume wrote 4 MiB %s after it was made", time.Since(start).Round(100*time.Millisecond))
	if got := s.objectSum(inlineBucket, prefix+"/file.bin"); got != sum {
		t.Fatalf("s3://%s/%s/file.bin has sha256 %s, the pod wrote %s", inlineBucket, prefix, got, sum)
	}
	writer, err := in.kc.CoreV1().Pods(inlineNS).Get(ctx, writer.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	handle := inline.Handle(string(writer.UID), "data")
	mounter := s.mounterPodOf(handle)
	if mounter.Spec.NodeName != writer.Spec.NodeName {
		t.Errorf("the inline volume's mounter runs on %s, its pod on %s", mounter.Spec.NodeName, writer.Spec.NodeName)
	}
	if ref := metav1.GetControllerOf(mounter); ref == nil || ref.Kind != "Node" || ref.Name != writer.Spec.NodeName {
		t.Errorf("the inline volume's mounter is controlled by %v, want its node %s (so that a drain evicts it)", ref, writer.Spec.NodeName)
	}
	if got, want := mounter.Annotations[spec.AnnotationForPod], inlineNS+"/writer/"+string(writer.UID); got != want {
		t.Errorf("the mounter serves pod %q, want %q", got, want)
	}

	// The pod goes: kubelet unpublishes, then its mounter goes too.
	if err := in.kc.CoreV1().Pods(inlineNS).Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(3*time.Minute, "the inline volume's mounter gone with its pod", func() (bool, error) {
		return s.mountersFor(handle) == 0, nil
	})
	if got := s.objectSum(inlineBucket, prefix+"/file.bin"); got != sum {
		t.Fatalf("after the pod went, s3://%s/%s/file.bin has sha256 %s, want %s", inlineBucket, prefix, got, sum)
	}

	// A pod that writes with asyncClose and ends (a Job's): kubelet
	// unpublishes the volume after the pod's phase says Succeeded; the
	// mounter uploads what is pending, exits, and goes, while the pod is
	// still there; the file is whole in S3.
	job := in.inlinePodWith("job", endpoint, prefix, map[string]string{"asyncClose": "true"},
		`set -e; head -c 8388608 /dev/urandom > /data/job.bin; echo "sum $(sha256sum /data/job.bin | cut -d' ' -f1)"`)
	jobSum := in.awaitLog("job", "sum ")
	in.waitPod("job", corev1.PodSucceeded, 2*time.Minute)
	jobHandle := inline.Handle(string(job.UID), "data")
	s.eventually(3*time.Minute, "the mounter of a finished pod gone once released", func() (bool, error) {
		return s.mountersFor(jobHandle) == 0, nil
	})
	if _, err := in.kc.CoreV1().Pods(inlineNS).Get(ctx, "job", metav1.GetOptions{}); err != nil {
		t.Fatalf("the finished pod: %v", err)
	}
	if got := s.objectSum(inlineBucket, prefix+"/job.bin"); got != jobSum {
		t.Fatalf("s3://%s/%s/job.bin has sha256 %s, the pod wrote %s", inlineBucket, prefix, got, jobSum)
	}

	// A namespace the allow-list does not name: an Event, no mounter.
	if _, err := s.kc.CoreV1().Secrets(s.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "objfuse-minio"},
		StringData: map[string]string{"accessKeyID": s3AccessKey, "secretAccessKey": s3SecretKey},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := s.inlinePod("refused", endpoint, prefix, "echo mounted; sleep 3600")
	s.eventFor(s.ns, "Pod", "refused", "may not declare objfuse volumes inline", 2*time.Minute)
	// A prefix the namespace's rule does not cover: the same.
	outside := in.inlinePod("outside", endpoint, "other/"+s.ns, "echo mounted; sleep 3600")
	in.eventFor(inlineNS, "Pod", "outside", "may declare inline only", 2*time.Minute)
	for _, p := range []*corev1.Pod{refused, outside} {
		if n := s.mountersFor(inline.Handle(string(p.UID), "data")); n != 0 {
			t.Errorf("pod %s/%s, refused, has %d mounter pods", p.Namespace, p.Name, n)
		}
		if now, err := s.kc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || now.Status.Phase != corev1.PodPending {
			t.Errorf("pod %s/%s, refused, is %v (%v), want Pending", p.Namespace, p.Name, now.Status.Phase, err)
		}
	}
}

// inlinePod runs script in the test image with an inline objfuse volume
// of prefix in inlineBucket at /data.
func (s *suite) inlinePod(name, endpoint, prefix, script string) *corev1.Pod {
	s.t.Helper()
	return s.inlinePodWith(name, endpoint, prefix, nil, script)
}

// inlinePodWith is inlinePod with more volume attributes (mount options).
func (s *suite) inlinePodWith(name, endpoint, prefix string, more map[string]string, script string) *corev1.Pod {
	s.t.Helper()
	attrs := map[string]string{"endpoint": endpoint, "pathStyle": "true", "bucket": inlineBucket, "prefix": prefix}
	for k, v := range more {
		attrs[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "c", Image: testImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:      []string{"/bin/sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{
				Name: "data",
				VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver:               "objfuse.csi.io",
					VolumeAttributes:     attrs,
					NodePublishSecretRef: &corev1.LocalObjectReference{Name: "objfuse-minio"},
				}},
			}},
		},
	}
	p, err := s.kc.CoreV1().Pods(s.ns).Create(s.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// storageClassEndpoint is the S3 endpoint a StorageClass names: the
// address the cluster reaches MinIO at.
func (s *suite) storageClassEndpoint(name string) string {
	s.t.Helper()
	sc, err := s.kc.StorageV1().StorageClasses().Get(s.ctx(), name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	ep := sc.Parameters["endpoint"]
	if ep == "" {
		s.t.Fatalf("StorageClass %s names no endpoint", name)
	}
	return ep
}

// mountersFor counts the mounter pods of a volume, live or going.
func (s *suite) mountersFor(handle string) int {
	s.t.Helper()
	n := 0
	for _, p := range s.mounterPodList() {
		if p.Annotations[spec.AnnotationVolume] == handle {
			n++
		}
	}
	return n
}
