package lifecycle_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// attachEnv is a fake cluster of one CSIDriver (attachRequired as
// given), PersistentVolumes pv-1 and pv-2 (ReadWriteMany) and pv-3
// (ReadWriteOnce) of this driver bound to claims c1, c2 and c3 of
// namespace app, and a Kube running on it.
type attachEnv struct {
	kc      *fake.Clientset
	k       *lifecycle.Kube
	events  *record.FakeRecorder
	mu      sync.Mutex
	deletes []time.Time // of attachments, when they were asked
}

func newAttachEnv(t *testing.T, attachRequired bool, grace time.Duration, extra ...runtime.Object) *attachEnv {
	t.Helper()
	objs := []runtime.Object{
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(attachRequired)}},
	}
	for _, v := range []struct {
		pv, claim string
		mode      corev1.PersistentVolumeAccessMode
	}{{"pv-1", "c1", corev1.ReadWriteMany}, {"pv-2", "c2", corev1.ReadWriteMany}, {"pv-3", "c3", corev1.ReadWriteOnce}} {
		objs = append(objs,
			&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: v.pv}, Spec: corev1.PersistentVolumeSpec{
				AccessModes:            []corev1.PersistentVolumeAccessMode{v.mode},
				ClaimRef:               &corev1.ObjectReference{Namespace: "app", Name: v.claim},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: "handle-" + v.pv}}}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: v.claim, Namespace: "app"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: v.pv}},
		)
	}
	e := &attachEnv{kc: fake.NewSimpleClientset(append(objs, extra...)...), events: record.NewFakeRecorder(100)}
	e.kc.PrependReactor("delete", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.deletes = append(e.deletes, time.Now())
		return false, nil, nil
	})
	e.k = lifecycle.NewKube(lifecycle.Config{Client: e.kc, Namespace: ns, Driver: driverName, Template: spec.Template{Image: "objfuse:test"},
		Events: e.events, DetachGrace: grace, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); e.k.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	poll(t, 10*time.Second, "the watch of scheduled pods running", func() bool { return lifecycle.AttachWatching(e.k) })
	return e
}

// pod makes a pod of namespace app on node using claim (or, with
// ephemeral, a generic ephemeral volume whose claim is <pod>-data).
func (e *attachEnv) pod(t *testing.T, name, node, claim string, ephemeral bool) {
	t.Helper()
	v := corev1.Volume{Name: "data"}
	if ephemeral {
		v.Ephemeral = &corev1.EphemeralVolumeSource{}
	} else {
		v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{v}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, err := e.kc.CoreV1().Pods("app").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// finish marks pod name of namespace app Succeeded, as kubelet does once
// its containers ended.
func (e *attachEnv) finish(t *testing.T, name string) {
	t.Helper()
	p, err := e.kc.CoreV1().Pods("app").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := e.kc.CoreV1().Pods("app").UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// expectEvent waits for an Event that says every one of want.
func (e *attachEnv) expectEvent(t *testing.T, what string, want ...string) {
	t.Helper()
	poll(t, 10*time.Second, what, func() bool {
		select {
		case ev := <-e.events.Events:
			for _, w := range want {
				if !strings.Contains(ev, w) {
					return false
				}
			}
			return true
		default:
			return false
		}
	})
}

// attached waits for the attachment of pv on node and returns it.
func (e *attachEnv) attached(t *testing.T, pv, node string) *storagev1.VolumeAttachment {
	t.Helper()
	var va *storagev1.VolumeAttachment
	poll(t, 10*time.Second, "the attachment of "+pv+" on "+node+" made", func() bool {
		var err error
		va, err = e.attachment(pv, node)
		return err == nil
	})
	return va
}

func (e *attachEnv) attachment(pv, node string) (*storagev1.VolumeAttachment, error) {
	return e.kc.StorageV1().VolumeAttachments().Get(context.Background(), lifecycle.AttachmentName("handle-"+pv, driverName, node), metav1.GetOptions{})
}

func (e *attachEnv) deleted() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Time(nil), e.deletes...)
}

// With attachRequired: false the controller makes the VolumeAttachment
// Kubernetes names for (volume, node) as soon as a pod that uses the
// volume is scheduled there (through a claim, or a generic ephemeral
// volume's, bound before or after the pod is), tells the pods of an
// attachment that failed why, keeps the attachment while another pod on
// the node takes over the volume, and deletes it once no pod there has
// needed it for the grace period.
func TestTheControllerAttachesWhatScheduledPodsUse(t *testing.T) {
	const grace = 3 * time.Second
	e := newAttachEnv(t, false, grace)
	ctx := t.Context()

	e.pod(t, "web-1", "node-a", "c1", false)
	va := e.attached(t, "pv-1", "node-a")
	if va.Spec.Attacher != driverName || va.Spec.NodeName != "node-a" || ptr.Deref(va.Spec.Source.PersistentVolumeName, "") != "pv-1" {
		t.Fatalf("attachment %+v, want pv-1 on node-a by %s", va.Spec, driverName)
	}

	// csi-attacher's ControllerPublishVolume failed: the pod is told why.
	va.Status.AttachError = &storagev1.VolumeError{Message: "mounter pod objfuse-mounter-x: not scheduled: Insufficient memory"}
	if _, err := e.kc.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.expectEvent(t, "an Event on the pod saying why its volume is not attached", "FailedAttachVolume", "Insufficient memory")

	// A rollout: the pod replaced on the same node within the grace.
	if err := e.kc.CoreV1().Pods("app").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod(t, "web-2", "node-a", "c1", false)
	// Another volume's pod on another node, and a generic ephemeral
	// volume whose claim is made (bound) only after its pod is scheduled.
	e.pod(t, "other", "node-b", "c2", false)
	e.pod(t, "eph", "node-c", "", true)
	if _, err := e.kc.CoreV1().PersistentVolumeClaims("app").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "eph-data", Namespace: "app"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"node-b", "node-c"} {
		e.attached(t, "pv-2", node)
	}
	// Past the grace of web-1's deletion, web-2 still holds the volume:
	// checked at every tick until twice the grace has passed.
	web1Gone := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ; time.Since(web1Gone) < 2*grace; <-tick.C {
		if err := lifecycle.SyncAttachment(ctx, e.k, "pv-1", "node-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.attachment("pv-1", "node-a"); err != nil {
			t.Fatalf("the attachment went while pod web-2 on the node uses the volume: %v", err)
		}
	}

	// The last pod finishes: its volume goes after the grace.
	e.finish(t, "web-2")
	finished := time.Now()
	poll(t, 10*time.Second, "the attachment of pv-1 on node-a deleted", func() bool {
		_, err := e.attachment("pv-1", "node-a")
		return apierrors.IsNotFound(err)
	})
	if d := e.deleted(); len(d) != 1 || d[0].Sub(finished) < grace {
		t.Fatalf("attachments deleted at %v, want one, at least %v after the last pod finished (%v)", d, grace, finished)
	}
	if _, err := e.attachment("pv-2", "node-b"); err != nil {
		t.Fatalf("an attachment another pod uses went too: %v", err)
	}

	// A pod that goes with its claim (its namespace deleted): its
	// attachment goes within the grace, not only at the next resync of
	// every attachment (30 s).
	if err := e.kc.CoreV1().PersistentVolumeClaims("app").Delete(ctx, "eph-data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.kc.CoreV1().Pods("app").Delete(ctx, "eph", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the attachment of pv-2 on node-c deleted", func() bool {
		_, err := e.attachment("pv-2", "node-c")
		return apierrors.IsNotFound(err)
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.k)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if got["objfuse_volume_attachments_made_total"] != 3 || got["objfuse_volume_attachments_deleted_total"] != 2 {
		t.Errorf("attachments made %v and deleted %v, want 3 and 2", got["objfuse_volume_attachments_made_total"], got["objfuse_volume_attachments_deleted_total"])
	}
}

// Where the CSIDriver says attachRequired: true, Kubernetes' attach/detach
// controller attaches: the controller makes and deletes no attachment.
func TestTheControllerLeavesAttachingToKubernetesWhenTheCSIDriverAsks(t *testing.T) {
	// Past the grace at once: a sync that may detach would. One
	// attachment the attach/detach controller made, no pod needing it.
	e := newAttachEnv(t, true, time.Nanosecond, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: lifecycle.AttachmentName("handle-pv-2", driverName, "node-b")},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "node-b", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-2")}},
	})
	ctx := t.Context()
	e.pod(t, "web", "node-a", "c1", false)
	for _, key := range [][2]string{{"pv-1", "node-a"}, {"pv-2", "node-b"}} {
		if err := lifecycle.SyncAttachment(ctx, e.k, key[0], key[1]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.attachment("pv-1", "node-a"); !apierrors.IsNotFound(err) {
		t.Fatalf("an attachment made under attachRequired: true: %v", err)
	}
	if d := e.deleted(); len(d) != 0 {
		t.Fatalf("attachments deleted under attachRequired: true: %v", d)
	}
}

// As Kubernetes' attach/detach controller does, a volume whose access
// modes allow one node is attached to one node at a time: a pod on a
// second node is told why it waits, and its node gets the volume once
// the first node's attachment is gone.
func TestASingleNodeVolumeIsAttachedToOneNodeAtATime(t *testing.T) {
	e := newAttachEnv(t, false, 200*time.Millisecond)
	ctx := t.Context()
	e.pod(t, "first", "node-a", "c3", false)
	e.attached(t, "pv-3", "node-a")
	e.pod(t, "second", "node-b", "c3", false)
	e.expectEvent(t, "a Multi-Attach Event on the second pod", "Multi-Attach error", "node-a")
	if _, err := e.attachment("pv-3", "node-b"); !apierrors.IsNotFound(err) {
		t.Fatalf("a ReadWriteOnce volume attached to a second node: %v", err)
	}
	if err := e.kc.CoreV1().Pods("app").Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Within 5 s: at once, not at the next look after a Multi-Attach
	// refusal (10 s).
	poll(t, 5*time.Second, "pv-3 attached to node-b once node-a's attachment is gone", func() bool {
		_, errA := e.attachment("pv-3", "node-a")
		_, errB := e.attachment("pv-3", "node-b")
		return apierrors.IsNotFound(errA) && errB == nil
	})
}

// ControllerUnpublishVolume (Stop) keeps a mounter that a pod on its node
// still uses: the controller deletes an attachment from its cache, which
// may lag behind a pod just scheduled there whose stage found the
// mounter by name. Once that pod finishes, the mounter goes.
func TestStopKeepsAMounterAPodOnItsNodeUses(t *testing.T) {
	e := newAttachEnv(t, false, time.Hour, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	ctx := t.Context()
	m := spec.Mounter{VolumeID: "handle-pv-1", NodeID: "node-a"}
	pod, err := spec.Template{Image: "objfuse:test"}.Pod(m, ns, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod(t, "web", "node-a", "c1", false)
	if err := e.k.Stop(ctx, m); err == nil || !strings.Contains(err.Error(), "app/web") {
		t.Fatalf("stop of a mounter pod app/web uses: %v, want an error naming it", err)
	}
	if _, err := e.kc.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the mounter pod a pod uses was deleted: %v", err)
	}
	e.finish(t, "web")
	if err := e.k.Stop(ctx, m); err != nil {
		t.Fatalf("stop once no pod uses the volume: %v", err)
	}
	if _, err := e.kc.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the mounter pod after its stop: %v", err)
	}
}

// An attachment being deleted (csi-attacher's finalizer holds it while
// its mounter drains) that a pod arriving on its node needs again is
// made anew once it is gone.
func TestAPodArrivingWhileItsAttachmentGoesGetsANewOne(t *testing.T) {
	e := newAttachEnv(t, false, 200*time.Millisecond)
	ctx := t.Context()
	vaResource := storagev1.SchemeGroupVersion.WithResource("volumeattachments")
	// As csi-attacher: a finalizer on each attachment, so that a delete
	// only marks it.
	e.kc.PrependReactor("create", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		va := a.(k8stesting.CreateAction).GetObject().(*storagev1.VolumeAttachment)
		va.Finalizers = []string{"external-attacher/objfuse-csi-io"}
		return false, nil, nil
	})
	e.kc.PrependReactor("delete", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := e.kc.Tracker().Get(vaResource, "", a.(k8stesting.DeleteAction).GetName())
		if err != nil {
			return false, nil, nil
		}
		va := obj.(*storagev1.VolumeAttachment)
		if len(va.Finalizers) == 0 {
			return false, nil, nil
		}
		va.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		return true, nil, e.kc.Tracker().Update(vaResource, va, "")
	})
	e.pod(t, "web-1", "node-a", "c1", false)
	first := e.attached(t, "pv-1", "node-a")
	if err := e.kc.CoreV1().Pods("app").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the attachment being deleted", func() bool {
		va, err := e.attachment("pv-1", "node-a")
		return err == nil && va.DeletionTimestamp != nil
	})
	e.pod(t, "web-2", "node-a", "c1", false)
	// csi-attacher's ControllerUnpublishVolume done: the finalizer goes.
	if err := e.kc.Tracker().Delete(vaResource, "", first.Name); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the attachment made anew for web-2", func() bool {
		va, err := e.attachment("pv-1", "node-a")
		return err == nil && va.DeletionTimestamp == nil
	})
}
