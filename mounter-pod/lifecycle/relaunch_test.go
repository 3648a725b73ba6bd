package lifecycle_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// An attached volume whose mounter pod is gone gets a new one, like the
// one ControllerPublishVolume made (read-only flag, credentials), and so
// does one being detached whose ControllerUnpublishVolume was refused (a
// pod on the node uses it); volumes with a live mounter, detaching ones
// and other drivers' are left alone.
// (The e2e test TestDeletedMounterIsReplaced runs this on a real cluster.)
func TestGoneMounterIsRelaunched(t *testing.T) {
	const ns = "objfuse-system"
	id := volume.ID{S3: volume.S3{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true}, Bucket: "bkt"}
	pv := func(name string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
		handle := id
		handle.Prefix = name + "/"
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			AccessModes: modes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: handle.String(),
				ControllerPublishSecretRef: &corev1.SecretReference{Namespace: ns, Name: "creds"},
			}}}}
	}
	va := func(name, pvName, attacher string, attached bool) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"csi.alpha.kubernetes.io/node-id": "node-a"}},
			Spec:       storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: "node-a", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
			Status:     storagev1.VolumeAttachmentStatus{Attached: attached},
		}
	}
	tmpl := spec.Template{Image: "objfuse:test"}
	alive := spec.Mounter{VolumeID: func() string { h := id; h.Prefix = "alive/"; return h.String() }(), NodeID: "node-a"}
	alivePod, _ := tmpl.Pod(alive, ns, "node-a")
	kc := fake.NewSimpleClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelHostname: "node-a"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, Data: map[string][]byte{
			s3store.AccessKeyFile: []byte("ak"), s3store.SecretKeyFile: []byte("sk")}},
		pv("gone", corev1.ReadOnlyMany), va("va-gone", "gone", driverName, true),
		pv("alive", corev1.ReadWriteMany), va("va-alive", "alive", driverName, true), alivePod,
		pv("attaching", corev1.ReadWriteMany), va("va-attaching", "attaching", driverName, false),
		pv("other", corev1.ReadWriteMany), va("va-other", "other", "other.csi.io", true),
		pv("detaching", corev1.ReadWriteMany), detaching(va("va-detaching", "detaching", driverName, true), ""),
		pv("kept", corev1.ReadWriteMany), detaching(va("va-kept", "kept", driverName, true), "pod app/web on node node-a uses the volume"),
	)
	// Pods come up ready at once, as a kubelet would make them.
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.UID = "new-uid"
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		return false, nil, nil
	})
	k, ctx := cachedKube(t, lifecycle.Config{Client: kc, Namespace: ns, Template: tmpl, ReadyTimeout: 5 * time.Second,
		Poll: 10 * time.Millisecond})
	for pass, want := range []int{2, 0} {
		if n, err := lifecycle.RelaunchMissing(ctx, k); err != nil || n != want {
			t.Fatalf("pass %d: %d relaunched, %v; want %d", pass, n, err, want)
		}
	}
	pods, _ := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 3 {
		t.Fatalf("%d mounter pods, want 3 (alive and two relaunched)", len(pods.Items))
	}
	kept := spec.Mounter{VolumeID: pv("kept").Spec.CSI.VolumeHandle, NodeID: "node-a"}
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, kept.PodName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("no new mounter pod for the volume whose detach was refused: %v", err)
	}
	gone := spec.Mounter{VolumeID: pv("gone").Spec.CSI.VolumeHandle, NodeID: "node-a"}
	pod, err := kc.CoreV1().Pods(ns).Get(ctx, gone.PodName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no new mounter pod for the gone one: %v", err)
	}
	if pod.Annotations[spec.AnnotationReadOnly] != "true" {
		t.Errorf("relaunched mounter of a ReadOnlyMany volume has read-only=%q", pod.Annotations[spec.AnnotationReadOnly])
	}
	secret, err := kc.CoreV1().Secrets(ns).Get(ctx, gone.SecretName(), metav1.GetOptions{})
	if err != nil || string(secret.Data[s3store.AccessKeyFile]) != "ak" {
		t.Fatalf("relaunched mounter's credentials: %v, %v", secret, err)
	}
}

// detaching marks an attachment as being deleted, and with detachErr as
// csi-attacher records a ControllerUnpublishVolume that failed.
func detaching(va *storagev1.VolumeAttachment, detachErr string) *storagev1.VolumeAttachment {
	va.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	va.Finalizers = []string{"external-attacher/objfuse-csi-io"}
	if detachErr != "" {
		va.Status.DetachError = &storagev1.VolumeError{Message: detachErr}
	}
	return va
}
