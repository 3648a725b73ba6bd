package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

const tenant = "team-a"

func inTenant(m spec.Mounter, namespace string) spec.Mounter {
	m.Volume.Mounter.Namespace = namespace
	return m
}

func listed(c *lifecycle.Config) { c.PVCNamespaces = []string{tenant} }

func readyStatus() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
}

// podsIn lists the pods of a namespace in the fake API.
func podsIn(t *testing.T, kc *fake.Clientset, namespace string) []corev1.Pod {
	t.Helper()
	l, err := kc.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// A volume whose mounters run in a listed PVC namespace gets its pod and
// Secret there, and a Stop that is not told the namespace (as
// ControllerUnpublishVolume is not) finds them.
func TestMountersRunInAListedPVCNamespace(t *testing.T) {
	k, kc := kubeLauncher(t, listed)
	m := inTenant(testMounter(), tenant)
	setStatus(t, kc, m.PodName(), readyStatus())
	ctx := context.Background()
	if _, err := k.Launch(ctx, m, map[string][]byte{"accessKeyID": []byte("AK")}); err != nil {
		t.Fatal(err)
	}
	if n := len(podsIn(t, kc, ns)); n != 0 {
		t.Errorf("%d pods in the driver's namespace, want none", n)
	}
	if _, err := kc.CoreV1().Pods(tenant).Get(ctx, m.PodName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the mounter pod is not in %s: %v", tenant, err)
	}
	if _, err := kc.CoreV1().Secrets(tenant).Get(ctx, m.SecretName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the mounter Secret is not in %s: %v", tenant, err)
	}
	if err := k.Stop(ctx, spec.Mounter{VolumeID: m.VolumeID, NodeID: m.NodeID}); err != nil {
		t.Fatal(err)
	}
	if n := len(podsIn(t, kc, tenant)); n != 0 {
		t.Errorf("%d pods left in %s after Stop", n, tenant)
	}
	if _, err := kc.CoreV1().Secrets(tenant).Get(ctx, m.SecretName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the mounter Secret after Stop: %v, want NotFound", err)
	}
}

// A namespace the admin did not list gets nothing, and the refusal says
// what to change.
func TestMountersNeverRunInAnUnlistedNamespace(t *testing.T) {
	k, kc := kubeLauncher(t, listed)
	m := inTenant(testMounter(), "team-b")
	_, err := k.Launch(context.Background(), m, nil)
	if !errors.Is(err, lifecycle.ErrNamespaceNotAllowed) || !strings.Contains(err.Error(), "mounter.pvcNamespaces") {
		t.Fatalf("launch in an unlisted namespace: %v; want ErrNamespaceNotAllowed naming mounter.pvcNamespaces", err)
	}
	for _, n := range []string{"team-b", tenant, ns} {
		if pods := podsIn(t, kc, n); len(pods) != 0 {
			t.Errorf("%d pods in %s", len(pods), n)
		}
	}
	if _, err := (lifecycle.Namespaces{Driver: ns, PVC: []string{tenant}}).Of(m); err == nil {
		t.Error("Namespaces.Of took team-b")
	}
}

// The tenant's ResourceQuota or LimitRange refusing the mounter is a
// refusal a person must mend, with the API server's words.
func TestAQuotaRefusalIsTold(t *testing.T) {
	k, kc := kubeLauncher(t, listed)
	kc.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "objfuse-mounter-x",
			errors.New("exceeded quota: compute, requested: limits.memory=256Mi, used: limits.memory=0, limited: limits.memory=64Mi"))
	})
	_, err := k.Launch(context.Background(), inTenant(testMounter(), tenant), map[string][]byte{"accessKeyID": []byte("AK")})
	if !errors.Is(err, lifecycle.ErrRefused) || !strings.Contains(err.Error(), "limited: limits.memory=64Mi") {
		t.Fatalf("launch refused by quota: %v; want ErrRefused with the API's words", err)
	}
}

// Where a tenant may create pods, a pod of a mounter's name that the
// driver did not make is neither adopted nor found by the node.
func TestAPodTheDriverDidNotMakeIsNotAMounter(t *testing.T) {
	k, kc := kubeLauncher(t, listed)
	m := inTenant(testMounter(), tenant)
	ctx := context.Background()
	fakeMounter := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: m.PodName(), Namespace: tenant, UID: "impostor",
			Labels:      map[string]string{spec.LabelComponent: spec.ComponentMounter, spec.LabelKey: m.Key()},
			Annotations: map[string]string{spec.AnnotationVolume: m.VolumeID, spec.AnnotationNode: m.NodeID, spec.AnnotationReadOnly: "false"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: spec.Container, Image: "evil", Command: []string{"/bin/sh"}}}},
		Status: readyStatus(),
	}
	if _, err := kc.CoreV1().Pods(tenant).Create(ctx, fakeMounter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Launch(ctx, m, map[string][]byte{"accessKeyID": []byte("AK")}); !errors.Is(err, lifecycle.ErrFailed) || !strings.Contains(err.Error(), "delete pod") {
		t.Fatalf("launch beside a pod the driver did not make: %v; want ErrFailed saying to delete it", err)
	}
	if _, err := kc.CoreV1().Secrets(tenant).Get(ctx, m.SecretName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("credentials were written beside a pod the driver did not make: %v", err)
	}
	uid, err := (lifecycle.Finder{Client: kc, Namespace: ns}).PodUID(ctx, m)
	if uid != "" || !errors.Is(err, spec.ErrNotMade) {
		t.Errorf("the node's finder: %q, %v; want no pod and ErrNotMade", uid, err)
	}

	// The same shape in the driver's namespace, where only the driver
	// makes pods, is as the driver's own (pods of older versions).
	made, err := k.Template.Pod(m, tenant, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Made(made, m); err != nil {
		t.Errorf("a pod of the template is not Made: %v", err)
	}
}

// A tenant may create, in its namespace, a pod and a Secret that claim
// another volume's mounter: the credentials sync writes that volume's
// keys only into the Secret of the pod in the namespace its mounters run
// in, and never writes the driver's own keys outside its namespace. The
// relaunch does not take the tenant's pod for the volume's mounter.
func TestTenantPodsCannotClaimAnotherVolume(t *testing.T) {
	id := volume.ID{S3: volume.S3{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true}, Bucket: "bkt"}
	handle := func(prefix string) string { h := id; h.Prefix = prefix + "/"; return h.String() }
	pv := func(name, mounterNS string, ref *corev1.SecretReference) *corev1.PersistentVolume {
		v := volume.Volume{ID: id, Mounter: volume.MounterResources{Namespace: mounterNS}}
		v.Prefix = name + "/"
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driverName, VolumeHandle: handle(name), VolumeAttributes: v.Context(), ControllerPublishSecretRef: ref,
			}}}}
	}
	creds := func(ak string) map[string][]byte {
		return map[string][]byte{s3store.AccessKeyFile: []byte(ak), s3store.SecretKeyFile: []byte(ak + "-secret")}
	}
	tmpl := spec.Template{Image: "objfuse:test"}
	victim := spec.Mounter{VolumeID: handle("victim"), NodeID: "node-a"} // its mounters run in the driver's namespace
	own := spec.Mounter{VolumeID: handle("own"), NodeID: "node-a"}       // the tenant's volume, with no Secret of its own
	impostor, _ := tmpl.Pod(victim, tenant, "node-a")                    // the tenant's copy of the victim's mounter
	ownPod, _ := tmpl.Pod(inTenant(own, tenant), tenant, "node-a")       // the tenant volume's genuine mounter
	victimRef := &corev1.SecretReference{Namespace: ns, Name: "victim-creds"}
	attachedVA := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-victim", Annotations: map[string]string{"csi.alpha.kubernetes.io/node-id": "node-a"}},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "node-a",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: func() *string { s := "victim"; return &s }()}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
	kc := fake.NewSimpleClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelHostname: "node-a"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim-creds"}, Data: creds("victim-key")},
		pv("victim", "", victimRef), attachedVA,
		pv("own", tenant, nil),
		impostor, victim.Secret(impostor, creds("tenant-old")),
		ownPod, own.Secret(ownPod, creds("tenant-old")),
	)
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.UID, p.Status = "new-uid", readyStatus()
		return false, nil, nil
	})
	defaults := t.TempDir()
	k, ctx := cachedKube(t, lifecycle.Config{Client: kc, Namespace: ns, PVCNamespaces: []string{tenant}, Template: tmpl,
		ReadyTimeout: 5 * time.Second, Poll: 10 * time.Millisecond,
		Credentials: lifecycle.Credentials{DefaultDir: defaults}})
	if _, err := lifecycle.SyncCredentials(ctx, k); err != nil {
		t.Fatal(err)
	}
	for _, m := range []spec.Mounter{victim, own} {
		s, err := kc.CoreV1().Secrets(tenant).Get(ctx, m.SecretName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(s.Data[s3store.AccessKeyFile]); got != "tenant-old" {
			t.Errorf("the credentials sync wrote %q into Secret %s/%s", got, tenant, s.Name)
		}
	}
	ev := pvEvent(t, kc, "own", "ObjfuseCredentialsNotSynced")
	if !strings.Contains(ev.Message, "never go outside the driver's namespace") {
		t.Errorf("the tenant volume without a Secret: Event %q", ev.Message)
	}

	// The victim has no mounter where its mounters run: the relaunch
	// starts one there, whatever runs in the tenant's namespace.
	if n, err := lifecycle.RelaunchMissing(ctx, k); err != nil || n != 1 {
		t.Fatalf("relaunch: %d started, %v; want 1 (the victim's, in %s)", n, err, ns)
	}
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, victim.PodName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the victim's relaunched mounter: %v", err)
	}
}

// Unpublish does not say where a volume's mounters run; its PV does, and
// Stop looks only there: a tenant's pod of the same name, which it could
// keep terminating for ever, neither holds the unpublish up nor is
// deleted.
func TestStopLooksWhereTheVolumesPVSays(t *testing.T) {
	tmpl := spec.Template{Image: "objfuse:test"}
	id := volume.ID{S3: volume.S3{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true}, Bucket: "bkt", Prefix: "v/"}
	v := volume.Volume{ID: id}
	m := spec.Mounter{VolumeID: id.String(), NodeID: "node-a", Volume: v}
	genuine, _ := tmpl.Pod(m, ns, "node-a")
	impostor, _ := tmpl.Pod(m, tenant, "node-a")
	impostor.Finalizers = []string{"example.com/hold"}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: driverName, VolumeHandle: m.VolumeID, VolumeAttributes: v.Context()}}}}
	kc := fake.NewSimpleClientset(pv, genuine, impostor)
	k, ctx := cachedKube(t, lifecycle.Config{Client: kc, Namespace: ns, PVCNamespaces: []string{tenant}, Template: tmpl, Poll: 10 * time.Millisecond})
	if err := k.Stop(ctx, spec.Mounter{VolumeID: m.VolumeID, NodeID: m.NodeID}); err != nil {
		t.Fatal(err)
	}
	if n := len(podsIn(t, kc, ns)); n != 0 {
		t.Errorf("%d mounter pods left in %s", n, ns)
	}
	if n := len(podsIn(t, kc, tenant)); n != 1 {
		t.Errorf("Stop touched the tenant's pod in %s (%d left)", tenant, n)
	}
}
