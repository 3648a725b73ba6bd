package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume/inline"
)

// appPod is a pod of namespace team-a on node-a declaring an inline
// objfuse volume "data" of bucket.
func appPod(name, uid, bucket string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: "node-a", Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver:               driverName,
			VolumeAttributes:     map[string]string{"endpoint": "http://s3:9000", "bucket": bucket, "pathStyle": "true"},
			NodePublishSecretRef: &corev1.LocalObjectReference{Name: "keys"},
		}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// The controller starts the mounter of an allowed inline volume on its
// pod's node, owned by the node and marked with the pod, with the pod's
// Secret's keys; refuses one the allow-list does not cover with an Event
// on the pod and no mounter; stops the mounter when the pod goes; and
// its orphan pass keeps an inline mounter only while its pod lives.
func TestInlineVolumesGetMountersWhileTheirPodLives(t *testing.T) {
	allow := filepath.Join(t.TempDir(), "inline-allow.yaml")
	if err := os.WriteFile(allow, []byte("- {namespace: team-a, endpoint: 'http://s3:9000', bucket: allowed}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := fake.NewSimpleClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid", Labels: map[string]string{corev1.LabelHostname: "host-a"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: "team-a"}, Data: map[string][]byte{"accessKeyID": []byte("AK"), "secretAccessKey": []byte("SK")}},
	)
	// kubelet: a mounter pod is ready as soon as it is made.
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod); p.Namespace == ns {
			p.UID = types.UID("11111111-2222-3333-4444-555555555555")
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		}
		return false, nil, nil
	})
	events := record.NewFakeRecorder(100)
	k := lifecycle.NewKube(lifecycle.Config{Client: kc, Namespace: ns, Driver: driverName, Template: spec.Template{Image: "objfuse:test"},
		InlineAllowFile: allow, Events: events, ReadyTimeout: 5 * time.Second, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	app := appPod("app", "app-uid-1", "allowed")
	if _, err := kc.CoreV1().Pods("team-a").Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := spec.Mounter{VolumeID: inline.Handle("app-uid-1", "data"), NodeID: "node-a"}
	var mounter *corev1.Pod
	poll(t, 10*time.Second, "the inline volume's mounter made", func() bool {
		var err error
		mounter, err = kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
		return err == nil
	})
	if got := mounter.Annotations[spec.AnnotationForPod]; got != "team-a/app/app-uid-1" {
		t.Errorf("the mounter serves %q", got)
	}
	if ref := metav1.GetControllerOf(mounter); ref == nil || ref.Kind != "Node" || ref.UID != "node-uid" {
		t.Errorf("the mounter's controller is %v, want node-a", ref)
	}
	if mounter.Spec.NodeSelector[corev1.LabelHostname] != "host-a" || !strings.Contains(strings.Join(mounter.Spec.Containers[0].Args, " "), "allowed") {
		t.Errorf("the mounter runs on %v with %v", mounter.Spec.NodeSelector, mounter.Spec.Containers[0].Args)
	}
	var creds *corev1.Secret
	poll(t, 10*time.Second, "the mounter's Secret made", func() bool {
		var err error
		creds, err = kc.CoreV1().Secrets(ns).Get(ctx, m.SecretName(), metav1.GetOptions{})
		return err == nil
	})
	if string(creds.Data["secretAccessKey"]) != "SK" {
		t.Errorf("the mounter's Secret holds %q, want the pod's Secret's keys", creds.Data)
	}

	// A bucket the rule does not name: an Event, and no mounter.
	other := appPod("other", "app-uid-2", "forbidden")
	if _, err := kc.CoreV1().Pods("team-a").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events.Events:
		if !strings.Contains(e, "InlineVolumeNotMounted") || !strings.Contains(e, `may declare inline only bucket "allowed"`) {
			t.Errorf("event %q", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Event on the pod whose inline volume is not allowed")
	}
	refused := spec.Mounter{VolumeID: inline.Handle("app-uid-2", "data"), NodeID: "node-a"}
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, refused.PodName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused inline volume has a mounter pod (%v)", err)
	}

	// Orphan collection keeps a live pod's mounter, and collects one
	// whose pod is gone (its delete missed, say while the controller was
	// down).
	stray, err := spec.Template{Image: "objfuse:test"}.Pod(spec.Mounter{VolumeID: "csi-stray", NodeID: "node-a", ForPod: "team-a/gone/gone-uid"}, ns, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the orphan pass deletes only the stray mounter", func() bool {
		n, err := lifecycle.CollectOrphans(ctx, k)
		return err == nil && n == 1
	})
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the orphan pass took the mounter of a live pod: %v", err)
	}
	// The pod terminating: its mounter stays, and one lost (a drain
	// evicts both) is started again, for kubelet's unpublish to drain it.
	app, err = kc.CoreV1().Pods("team-a").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	app.DeletionTimestamp = &now
	if err := kc.CoreV1().Pods(ns).Delete(ctx, m.PodName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods("team-a").Update(ctx, app, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the mounter of a terminating pod started again", func() bool {
		// Again until the controller's cache has seen the mounter go.
		if err := lifecycle.SyncInline(ctx, k, "team-a", "app"); err != nil {
			t.Fatal(err)
		}
		_, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
		return err == nil
	})
	// Its containers ended (kubelet writes the phase before it
	// unpublishes): the mounter still serves until released.
	app.Status.Phase = corev1.PodSucceeded
	if _, err := kc.CoreV1().Pods("team-a").UpdateStatus(ctx, app, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the watch to see the pod finished", func() bool {
		return lifecycle.InlinePodPhase(k, "team-a", "app") == corev1.PodSucceeded
	})
	if err := lifecycle.SyncInline(ctx, k, "team-a", "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the mounter of a finished pod went before it was released: %v", err)
	}
	if n, err := lifecycle.CollectOrphans(ctx, k); err != nil || n != 0 {
		t.Fatalf("the orphan pass took %d mounters (%v) of a finished pod not yet deleted", n, err)
	}
	// Released (the node unpublished it), the mounter exits: it goes.
	mounter, err = kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mounter.Status.Phase = corev1.PodSucceeded
	if _, err := kc.CoreV1().Pods(ns).UpdateStatus(ctx, mounter, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the released mounter of a finished pod deleted", func() bool {
		if err := lifecycle.SyncInline(ctx, k, "team-a", "app"); err != nil {
			t.Fatal(err)
		}
		_, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// The pod goes: so does anything left of its mounters (that the
	// controller has seen: one it starts as the pod goes is the orphan
	// pass's).
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, stray2(t, m), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the controller's cache to see the left mounter", func() bool {
		return lifecycle.MounterPodSeen(ctx, k, m.PodName())
	})
	if err := kc.CoreV1().Pods("team-a").Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the inline volume's mounter gone with its pod", func() bool {
		_, err := kc.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// stray2 is a live mounter pod of m, as a forced delete of its pod leaves.
func stray2(t *testing.T, m spec.Mounter) *corev1.Pod {
	m.ForPod = "team-a/app/app-uid-1"
	p, err := spec.Template{Image: "objfuse:test"}.Pod(m, ns, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
