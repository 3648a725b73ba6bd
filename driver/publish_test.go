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

// The scheduler's reason for a Pending mounter pod is the error of
// ControllerPublishVolume, so the attacher's Event on the pod shows it.
func TestPublishReportsPendingMounter(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	vol, err := env.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-pending", VolumeCapabilities: mountCap(), Secrets: env.Secrets})
	if err != nil {
		t.Fatal(err)
	}
	kc := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/1 nodes are available: 1 Insufficient memory.",
		}}}
		return false, nil, nil
	})
	d, err := driver.New(driver.Options{
		Mode:       driver.ModeController,
		S3Defaults: volume.Defaults{Endpoint: env.MinIO.Endpoint, PathStyle: true},
		Launcher: lifecycle.NewKube(lifecycle.Config{Client: kc, Namespace: "objfuse-system", Template: spec.Template{Image: "objfuse:test"},
			ReadyTimeout: time.Second, Poll: 10 * time.Millisecond, Logger: slog.Default()}),
		KubeClient: kc,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = driver.Controller(d).ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: vol.GetVolume().GetVolumeId(), NodeId: "node-a", VolumeCapability: mountCap()[0],
		VolumeContext: vol.GetVolume().GetVolumeContext(), Secrets: env.Secrets,
	})
	s := status.Convert(err)
	if s.Code() != codes.DeadlineExceeded || !strings.Contains(s.Message(), "Insufficient memory") {
		t.Fatalf("publish with a pod that cannot be scheduled: %v", err)
	}
	_, err = driver.Controller(d).ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: vol.GetVolume().GetVolumeId(), NodeId: "node-b", VolumeCapability: mountCap()[0],
		VolumeContext: vol.GetVolume().GetVolumeContext(), Secrets: env.Secrets,
	})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("publish to a node that does not exist: %v, want NotFound", err)
	}
}
