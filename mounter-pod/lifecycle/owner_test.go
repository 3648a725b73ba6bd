package lifecycle_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
)

// The name of a VolumeAttachment kube-controller-manager v1.33 made for a
// volume of objfuse's on a local cluster's node.
func TestAttachmentNameIsKubernetes(t *testing.T) {
	got := lifecycle.AttachmentName("objfuse1|http://10.243.0.11:9000|us-east-1|true|pvc-5f3db010-a4a1-4085-ab9b-031db8b50ee3|", driverName, "objfuse-node-3")
	if want := "csi-b53f3e7f89ba9275b1e29096efb345a1ce27414274384e2a53acca41d1389bc3"; got != want {
		t.Fatalf("attachment name %s, want %s", got, want)
	}
}

// A mounter pod is controlled by the attachment it serves (kubectl drain
// then evicts it without --force), and a live pod Launch adopts is made so.
func TestMounterPodIsControlledByItsAttachment(t *testing.T) {
	k, kc := kubeLauncher(t, func(c *lifecycle.Config) { c.Driver = driverName })
	m := testMounter()
	ctx := context.Background()
	setStatus(t, kc, m.PodName(), corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	launch := func() *corev1.Pod {
		t.Helper()
		if _, err := k.Launch(ctx, m, map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("b")}); err != nil {
			t.Fatal(err)
		}
		pod, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	if pod := launch(); len(pod.OwnerReferences) != 0 {
		t.Fatalf("owners %v with no attachment (csi-sanity, a CSI client of its own), want none", pod.OwnerReferences)
	}

	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: lifecycle.AttachmentName(m.VolumeID, driverName, "node-a"), UID: types.UID("va-uid-1")},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "node-a"},
	}
	if _, err := kc.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := launch() // adopts the live pod
	if len(pod.OwnerReferences) != 1 {
		t.Fatalf("owners %v, want the attachment", pod.OwnerReferences)
	}
	o := pod.OwnerReferences[0]
	if o.Kind != "VolumeAttachment" || o.APIVersion != "storage.k8s.io/v1" || o.Name != va.Name || o.UID != va.UID || o.Controller == nil || !*o.Controller {
		t.Fatalf("owner %+v, want the controller reference to %s", o, va.Name)
	}

	if err := kc.CoreV1().Pods(ns).Delete(ctx, m.PodName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod := launch(); len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != va.UID {
		t.Fatalf("a new pod's owners %v, want the attachment", pod.OwnerReferences)
	}

	// The attachment made again (a new UID): the live pod Launch adopts
	// follows it, or the garbage collector would take it for an orphan.
	if err := kc.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	va.UID = types.UID("va-uid-2")
	if _, err := kc.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod := launch(); len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != "va-uid-2" {
		t.Fatalf("owners %v after the attachment was made again, want its new UID", pod.OwnerReferences)
	}
}

// An attachment of another driver, or on another node, owns nothing.
func TestMounterPodIsNotOwnedByAnotherAttachment(t *testing.T) {
	k, kc := kubeLauncher(t, func(c *lifecycle.Config) { c.Driver = driverName })
	m := testMounter()
	ctx := context.Background()
	setStatus(t, kc, m.PodName(), corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: lifecycle.AttachmentName(m.VolumeID, driverName, "node-a"), UID: types.UID("va-uid-1")},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: "other.csi.io", NodeName: "node-a"},
	}
	if _, err := kc.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Launch(ctx, m, map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("b")}); err != nil {
		t.Fatal(err)
	}
	pod, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.OwnerReferences) != 0 {
		t.Fatalf("owners %v, want none: the attachment is another driver's", pod.OwnerReferences)
	}
}
