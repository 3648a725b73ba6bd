package driver_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/objfuse/objfuse/driver"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/volume"
)

// A StorageClass with mounterNamespace: pvc makes volumes whose mounters
// run in their PVC's namespace, if the admin listed it; every refusal
// says what to change, with the code csi-provisioner and csi-attacher
// show in the PVC's and the pod's Events.
func TestMountersInThePVCNamespace(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	kc := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.UID = "11111111-2222-3333-4444-555555555555"
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		return false, nil, nil
	})
	const driverNS, tenant = "objfuse-system", "team-a"
	d, err := driver.New(driver.Options{
		Mode:       driver.ModeController,
		S3Defaults: volume.Defaults{Endpoint: env.MinIO.Endpoint, PathStyle: true},
		Launcher: lifecycle.NewKube(lifecycle.Config{Client: kc, Namespace: driverNS, PVCNamespaces: []string{tenant},
			Template: spec.Template{Image: "objfuse:test"}, ReadyTimeout: 5 * time.Second, Poll: 10 * time.Millisecond, Logger: slog.Default()}),
		KubeClient: kc, Namespace: driverNS, PVCNamespaces: []string{tenant},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := driver.Controller(d)
	create := func(params map[string]string) (*csi.CreateVolumeResponse, error) {
		return c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-tenant", VolumeCapabilities: mountCap(), Secrets: env.Secrets, Parameters: params})
	}
	wantRefusal := func(what string, err error, code codes.Code, says string) {
		t.Helper()
		if s := status.Convert(err); s.Code() != code || !strings.Contains(s.Message(), says) {
			t.Errorf("%s: %v; want %v saying %q", what, err, code, says)
		}
	}
	_, err = create(map[string]string{volume.ParamMounterNamespace: volume.MounterNamespacePVC})
	wantRefusal("no PVC namespace in the request", err, codes.InvalidArgument, "--extra-create-metadata")
	_, err = create(map[string]string{volume.ParamMounterNamespace: volume.MounterNamespacePVC, volume.ParamPVCNamespace: "team-b"})
	wantRefusal("an unlisted namespace", err, codes.FailedPrecondition, "mounter.pvcNamespaces")
	_, err = create(map[string]string{volume.ParamMounterNamespace: tenant, volume.ParamPVCNamespace: tenant})
	wantRefusal("a namespace name in a StorageClass", err, codes.InvalidArgument, "want pvc")

	vol, err := create(map[string]string{volume.ParamMounterNamespace: volume.MounterNamespacePVC, volume.ParamPVCNamespace: tenant})
	if err != nil {
		t.Fatal(err)
	}
	vctx := vol.GetVolume().GetVolumeContext()
	if got := vctx[volume.ParamMounterNamespace]; got != tenant {
		t.Fatalf("the volume context says mounterNamespace %q, want %q", got, tenant)
	}
	publish := func(secrets map[string]string) error {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId: vol.GetVolume().GetVolumeId(), NodeId: "node-a", VolumeCapability: mountCap()[0],
			VolumeContext: vctx, Secrets: secrets,
		})
		return err
	}
	wantRefusal("publish with the driver's own keys", publish(nil), codes.FailedPrecondition, "never go outside the driver's namespace")
	if err := publish(env.Secrets); err != nil {
		t.Fatal(err)
	}
	m := spec.Mounter{VolumeID: vol.GetVolume().GetVolumeId(), NodeID: "node-a"}
	if _, err := kc.CoreV1().Pods(tenant).Get(ctx, m.PodName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("no mounter pod in %s: %v", tenant, err)
	}
	if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: m.VolumeID, NodeId: m.NodeID}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods(tenant).Get(ctx, m.PodName(), metav1.GetOptions{}); err == nil {
		t.Error("the mounter pod is still in the tenant's namespace after unpublish")
	}
}
