package lifecycle_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// The orphan collector deletes old mounter pods no VolumeAttachment
// accounts for, keeps the attached ones (published to a CSI node id that
// is not the node's name), and asks the API nothing when its cache finds
// no orphan.
func TestOrphanedMountersAreCollected(t *testing.T) {
	const ns = "objfuse-system"
	pvName := "pv-attached"
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: "vol-attached"}}}}
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-attached", Annotations: map[string]string{"csi.alpha.kubernetes.io/node-id": "csi-node-a"}},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "node-a", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
		Status:     storagev1.VolumeAttachmentStatus{Attached: true},
	}
	tmpl := spec.Template{Image: "objfuse:test"}
	mounterPod := func(volumeID string) *corev1.Pod {
		p, err := tmpl.Pod(spec.Mounter{VolumeID: volumeID, NodeID: "csi-node-a"}, ns, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
		return p
	}
	attached := mounterPod("vol-attached")
	kc := fake.NewSimpleClientset(pv, va, attached)
	k, ctx := cachedKube(t, lifecycle.Config{Client: kc, Namespace: ns, Template: tmpl})
	apiReads := func() (n int) {
		for _, a := range kc.Actions() {
			if (a.GetVerb() == "list" || a.GetVerb() == "get") && a.GetResource().Resource != "pods" {
				n++
			}
		}
		return n
	}

	kc.ClearActions()
	lifecycle.CollectOrphans(ctx, k)
	if n := apiReads(); n != 0 {
		t.Errorf("a pass without orphans read the API %d times", n)
	}

	orphan := mounterPod("vol-detached")
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the orphan collected", func() bool {
		lifecycle.CollectOrphans(ctx, k)
		_, err := kc.CoreV1().Pods(ns).Get(ctx, orphan.Name, metav1.GetOptions{})
		return err != nil
	})
	if apiReads() == 0 {
		t.Error("the orphan was deleted without asking the API")
	}
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, attached.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the attached volume's mounter pod: %v", err)
	}
}

// A cache behind the API (an attachment made a moment ago) does not get
// a mounter pod deleted: the collector confirms an orphan with the API.
func TestOrphanCheckAsksTheAPIBeforeDeleting(t *testing.T) {
	const ns = "objfuse-system"
	tmpl := spec.Template{Image: "objfuse:test"}
	pod, err := tmpl.Pod(spec.Mounter{VolumeID: "vol-new", NodeID: "node-a"}, ns, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	pod.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	kc := fake.NewSimpleClientset(pod)
	k := lifecycle.NewKube(lifecycle.Config{Client: kc, Namespace: ns, Template: tmpl, Driver: driverName})
	ctx := t.Context()
	frozen, freeze := context.WithCancel(ctx)
	if err := lifecycle.StartCache(frozen, k); err != nil {
		t.Fatal(err)
	}
	freeze() // the cache sees the pod and no attachment, and stays so
	pvName := "pv-new"
	if _, err := kc.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: "vol-new"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-new"},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "node-a", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lifecycle.CollectOrphans(ctx, k)
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the mounter pod of an attachment the cache has not seen: %v", err)
	}
}
