package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// The controller copies a rotated publish Secret into the mounter Secret
// of each volume that names it, and touches nothing else. (The e2e test
// TestRotatedCredentialsReachRunningMounts runs this on a real cluster.)
func TestCredentialsSyncFollowsThePVsSecret(t *testing.T) {
	const ns = "objfuse-system"
	tmpl := spec.Template{Image: "objfuse:test"}
	var pvOf func(drv, name, handle, secret string) *corev1.PersistentVolume
	creds := func(ak string) map[string][]byte {
		return map[string][]byte{s3store.AccessKeyFile: []byte(ak), s3store.SecretKeyFile: []byte(ak + "-secret")}
	}
	pv := func(name, handle, secret string) *corev1.PersistentVolume {
		return pvOf(driverName, name, handle, secret)
	}
	pvOf = func(drv, name, handle, secret string) *corev1.PersistentVolume {
		src := &corev1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: handle}
		if secret != "" {
			src.ControllerPublishSecretRef = &corev1.SecretReference{Namespace: ns, Name: secret}
		}
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: src}}}
	}
	objs := []runtime.Object{
		// Another driver's PV of the same handle, and its Secret: not ours.
		pvOf("other.csi.io", "pv-other", "vol-no-pv", "other"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Data: creds("new")},
		// An emptied Secret does not hand the mounter the driver's defaults.
		pv("pv-emptied", "vol-emptied", "emptied"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "emptied"}},
		pv("pv-rotated", "vol-rotated", "rotated"),
		pv("pv-unchanged", "vol-unchanged", "unchanged"),
		pv("pv-missing", "vol-missing", "gone"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rotated"}, Data: creds("new")},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unchanged"}, Data: creds("same")},
		// Static PVs of one bucket naming different Secrets.
		pv("pv-ambiguous-1", "vol-ambiguous", "rotated"),
		pv("pv-ambiguous-2", "vol-ambiguous", "unchanged"),
	}
	mounters := map[string]string{ // volume → the key its mounter Secret holds now
		"vol-rotated": "old", "vol-unchanged": "same", "vol-missing": "old", "vol-no-pv": "old", "vol-emptied": "old", "vol-ambiguous": "old",
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
	defaults := t.TempDir() // the driver's own credentials, which no mounter here uses
	for name, v := range creds("default") {
		if err := os.WriteFile(filepath.Join(defaults, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k, ctx := cachedKube(t, lifecycle.Config{Client: kc, Namespace: ns, Template: tmpl,
		Credentials: lifecycle.Credentials{DefaultDir: defaults}})
	if n, err := lifecycle.SyncCredentials(ctx, k); err != nil || n != 1 {
		t.Fatalf("first pass: %d updated, %v; want 1", n, err)
	}
	// Once the cache has seen that update, passes change nothing.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		n, err := lifecycle.SyncCredentials(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("passes keep updating %d Secrets", n)
		}
	}
	want := map[string]string{"vol-rotated": "new", "vol-unchanged": "same", "vol-missing": "old", "vol-no-pv": "old", "vol-emptied": "old", "vol-ambiguous": "old"}
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

	// Whoever rotates keys is told, on the PVs, which volumes they do
	// not reach and why; and, once the missing Secret exists, that they
	// do again.
	for pv, says := range map[string]string{
		"pv-missing": `"gone" not found`, "pv-emptied": "is empty",
		"pv-ambiguous-1": "name different Secrets", "pv-ambiguous-2": "name different Secrets",
	} {
		if ev := pvEvent(t, kc, pv, "ObjfuseCredentialsNotSynced"); !strings.Contains(ev.Message, says) || ev.Type != corev1.EventTypeWarning {
			t.Errorf("%s: Event %q, want one saying %q", pv, ev.Message, says)
		}
	}
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}, Data: creds("back")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := lifecycle.SyncCredentials(ctx, k); err != nil || n != 1 {
		t.Fatalf("pass after the missing Secret came: %d updated, %v; want 1", n, err)
	}
	pvEvent(t, kc, "pv-missing", "ObjfuseCredentialsSynced")
	// Events reach the API in order: every pass that came before told
	// the problem only once.
	if ev := pvEvent(t, kc, "pv-missing", "ObjfuseCredentialsNotSynced"); ev.Count > 1 {
		t.Errorf("the problem was told %d times", ev.Count)
	}
	for _, e := range pvEvents(t, kc) {
		if e.InvolvedObject.Name == "pv-rotated" || e.InvolvedObject.Name == "pv-unchanged" {
			t.Errorf("Event on a PV whose credentials sync: %s %s", e.Reason, e.Message)
		}
	}
}

func pvEvents(t *testing.T, kc *fake.Clientset) []corev1.Event {
	t.Helper()
	evs, err := kc.CoreV1().Events("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

// pvEvent waits for the Event of reason on the PV named pv.
func pvEvent(t *testing.T, kc *fake.Clientset, pv, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	poll(t, 10*time.Second, reason+" Event on "+pv, func() bool {
		for _, e := range pvEvents(t, kc) {
			if e.InvolvedObject.Kind == "PersistentVolume" && e.InvolvedObject.Name == pv && e.Reason == reason {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// driverName is the CSI driver whose volumes the tests' Kube keeps.
const driverName = "objfuse.csi.io"

// cachedKube is a Kube of cfg on its fake API, its cluster cache filled,
// as the periodic passes find it; the cache stops when the test ends.
func cachedKube(t *testing.T, cfg lifecycle.Config) (*lifecycle.Kube, context.Context) {
	t.Helper()
	cfg.Driver = driverName
	k := lifecycle.NewKube(cfg)
	ctx := t.Context()
	if err := lifecycle.StartCache(ctx, k); err != nil {
		t.Fatal(err)
	}
	return k, ctx
}

// poll calls cond until it holds, failing the test at the deadline.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ; !cond(); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// A volume on the driver's own keys (no Secret, --s3-credentials-for-volumes)
// whose mounters run in the driver's namespace gets those keys when they
// rotate: the rule that keeps them out of PVC namespaces does not apply.
func TestCredentialsSyncRotatesTheDriversOwnKeys(t *testing.T) {
	tmpl := spec.Template{Image: "objfuse:test"}
	m := spec.Mounter{VolumeID: "vol-defaults", NodeID: "node-a"}
	pod, err := tmpl.Pod(m, ns, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-defaults"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: m.VolumeID}}}}
	kc := fake.NewSimpleClientset(pv, pod, m.Secret(pod, map[string][]byte{s3store.AccessKeyFile: []byte("old"), s3store.SecretKeyFile: []byte("old")}))
	defaults := t.TempDir()
	for name, v := range map[string]string{s3store.AccessKeyFile: "rotated", s3store.SecretKeyFile: "rotated-secret"} {
		if err := os.WriteFile(filepath.Join(defaults, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k, ctx := cachedKube(t, lifecycle.Config{Client: kc, Namespace: ns, Template: tmpl,
		Credentials: lifecycle.Credentials{DefaultDir: defaults, DefaultForVolumes: true}})
	if n, err := lifecycle.SyncCredentials(ctx, k); err != nil || n != 1 {
		t.Fatalf("sync: %d updated, %v; want 1", n, err)
	}
	s, err := kc.CoreV1().Secrets(ns).Get(ctx, m.SecretName(), metav1.GetOptions{})
	if err != nil || string(s.Data[s3store.AccessKeyFile]) != "rotated" {
		t.Fatalf("the mounter's Secret after the driver's keys rotated: %v, %v", s, err)
	}
}
