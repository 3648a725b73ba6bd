package driver_test

import (
	"context"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/objfuse/objfuse/driver"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/launcher"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// The controller copies a rotated publish Secret into the mounter Secret
// of each volume that names it, and touches nothing else. (The e2e test
// TestRotatedCredentialsReachRunningMounts runs this on a real cluster.)
func TestCredentialsSyncFollowsThePVsSecret(t *testing.T) {
	const ns = "objfuse-system"
	tmpl := spec.Template{Image: "objfuse:test"}
	creds := func(ak string) map[string][]byte {
		return map[string][]byte{s3store.AccessKeyFile: []byte(ak), s3store.SecretKeyFile: []byte(ak + "-secret")}
	}
	pv := func(name, handle, secret string) *corev1.PersistentVolume {
		src := &corev1.CSIPersistentVolumeSource{Driver: driver.DefaultName, VolumeHandle: handle}
		if secret != "" {
			src.ControllerPublishSecretRef = &corev1.SecretReference{Namespace: ns, Name: secret}
		}
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: src}}}
	}
	objs := []runtime.Object{
		pv("pv-rotated", "vol-rotated", "rotated"),
		pv("pv-unchanged", "vol-unchanged", "unchanged"),
		pv("pv-missing", "vol-missing", "gone"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rotated"}, Data: creds("new")},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unchanged"}, Data: creds("same")},
	}
	mounters := map[string]string{ // volume → the key its mounter Secret holds now
		"vol-rotated": "old", "vol-unchanged": "same", "vol-missing": "old", "vol-no-pv": "old",
	}
	for vol, ak := range mounters {
		m := spec.Mounter{VolumeID: vol, NodeID: "node-a"}
		pod, err := tmpl.Pod(m, ns, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, pod, m.Secret(pod, creds(ak)))
	}
	kc := fake.NewSimpleClientset(objs...)
	d, err := driver.New(driver.Options{
		Mode:       driver.ModeController,
		Launcher:   &launcher.Kube{Client: kc, Namespace: ns, Template: tmpl, Logger: slog.Default()},
		KubeClient: kc,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass, wantUpdated := range []int{1, 0} {
		n, err := driver.SyncCredentials(ctx, d)
		if err != nil || n != wantUpdated {
			t.Fatalf("pass %d: %d updated, %v; want %d", pass, n, err, wantUpdated)
		}
	}
	want := map[string]string{"vol-rotated": "new", "vol-unchanged": "same", "vol-missing": "old", "vol-no-pv": "old"}
	for vol, ak := range want {
		m := spec.Mounter{VolumeID: vol, NodeID: "node-a"}
		s, err := kc.CoreV1().Secrets(ns).Get(ctx, m.SecretName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(s.Data[s3store.AccessKeyFile]); got != ak {
			t.Errorf("%s's mounter holds key %q, want %q", vol, got, ak)
		}
	}
}
