package driver_test

import (
	"context"
	"log/slog"
	"path/filepath"
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
	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
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

// ControllerPublishVolume returns once the mounter's container runs, so a
// mounter that then exits (keys S3 refuses) is NodeStageVolume's to
// report: with the pod's reason, at once, not after the socket wait. A
// mounter that exited having handed its connection over (an upgrade) is
// not one: the stage waits for its successor.
func TestStageSaysWhyItsMounterExited(t *testing.T) {
	const volID, uid = "objfuse1|http://s3:9000|us-east-1|true|pvc-1|", "11111111-2222-3333-4444-555555555555"
	m := spec.MounterIn(volID, "node-a", "")
	stage := func(t *testing.T, lastExit *corev1.ContainerStateTerminated, wait time.Duration, tune ...func(*corev1.Pod)) (*status.Status, time.Duration) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: m.PodName(), Namespace: "objfuse-system", UID: uid, Annotations: map[string]string{spec.AnnotationVolume: volID}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name:                 spec.Container,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: lastExit},
			}}},
		}
		for _, f := range tune {
			f(pod)
		}
		kc := fake.NewSimpleClientset(pod)
		dir := t.TempDir()
		d, err := driver.New(driver.Options{Mode: driver.ModeNode, NodeID: "node-a", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"),
			Mounts: &mounts.Fake{}, KubeClient: kc, Namespace: "objfuse-system", MounterWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = driver.Node(d).NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
			VolumeId: volID, StagingTargetPath: filepath.Join(dir, "staging"), VolumeCapability: mountCap()[0],
			PublishContext: map[string]string{driver.PublishContextMounterUID: uid},
		})
		return status.Convert(err), time.Since(start)
	}
	t.Run("keys S3 refuses", func(t *testing.T) {
		const wait = 20 * time.Second
		s, took := stage(t, &corev1.ContainerStateTerminated{ExitCode: 1, Message: "http://s3:9000 does not know the access key (InvalidAccessKeyId)"}, wait)
		// Unavailable, not FailedPrecondition: kubelet retries it, and
		// unstages what a final error would leave behind.
		if s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "InvalidAccessKeyId") || !strings.Contains(s.Message(), m.PodName()) {
			t.Fatalf("stage with a mounter that exited: %v %q, want Unavailable naming its pod and why", s.Code(), s.Message())
		}
		if took >= wait {
			t.Fatalf("stage told why after %v, the whole socket wait", took)
		}
	})
	t.Run("being deleted", func(t *testing.T) {
		const wait = 20 * time.Second
		s, took := stage(t, &corev1.ContainerStateTerminated{ExitCode: handoff.ExitHandedOver}, wait, func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			p.Finalizers = []string{"test/hold"} // a pod being deleted, as kubelet drains it
		})
		if s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "being deleted") || took >= wait {
			t.Fatalf("stage with a mounter pod being deleted: %v %q after %v, want Unavailable saying so before the %v wait ends", s.Code(), s.Message(), took, wait)
		}
	})
	t.Run("handed over", func(t *testing.T) {
		const wait = 3 * time.Second
		s, took := stage(t, &corev1.ContainerStateTerminated{ExitCode: handoff.ExitHandedOver}, wait)
		if s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "does not answer") || took < wait {
			t.Fatalf("stage with a mounter that handed over: %v %q after %v, want the whole %v waited for its successor", s.Code(), s.Message(), took, wait)
		}
	})
}

// With attachRequired: false kubelet stages with no publish context: the
// stage finds the volume's mounter by name once the controller has made
// it (here after its first ask, crash-looping on keys S3 refuses, which the stage
// then reports), says why a mounter pod that never runs does not (the
// scheduler's reason), and that none came when none does.
func TestStageFindsItsMounterWithoutAPublishContext(t *testing.T) {
	const volID = "objfuse1|http://s3:9000|us-east-1|true|pvc-1|"
	m := spec.MounterIn(volID, "node-a", "")
	stage := func(t *testing.T, kc *fake.Clientset, wait time.Duration) *status.Status {
		dir := t.TempDir()
		d, err := driver.New(driver.Options{Mode: driver.ModeNode, NodeID: "node-a", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"),
			Mounts: &mounts.Fake{}, KubeClient: kc, Namespace: "objfuse-system", MounterWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		_, err = driver.Node(d).NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
			VolumeId: volID, StagingTargetPath: filepath.Join(dir, "staging"), VolumeCapability: mountCap()[0],
		})
		return status.Convert(err)
	}
	t.Run("made later", func(t *testing.T) {
		kc := fake.NewSimpleClientset()
		// The controller, later than kubelet: the pod appears only once
		// the stage has asked for it and found none.
		asked := 0
		kc.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if asked++; asked == 2 {
				if err := kc.Tracker().Add(&corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: m.PodName(), Namespace: "objfuse-system", UID: "11111111-2222-3333-4444-555555555555", Annotations: map[string]string{spec.AnnotationVolume: volID}},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
						Name:                 spec.Container,
						State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
						LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "keys refused (InvalidAccessKeyId)"}},
					}}},
				}); err != nil {
					t.Error(err)
				}
			}
			return false, nil, nil
		})
		if s := stage(t, kc, 20*time.Second); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "InvalidAccessKeyId") {
			t.Fatalf("stage whose mounter came later and crashed: %v %q, want Unavailable with the mounter's reason", s.Code(), s.Message())
		}
	})
	t.Run("not scheduled", func(t *testing.T) {
		kc := fake.NewSimpleClientset(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: m.PodName(), Namespace: "objfuse-system", UID: "11111111-2222-3333-4444-555555555555", Annotations: map[string]string{spec.AnnotationVolume: volID}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient cpu.",
			}}},
		})
		if s := stage(t, kc, 2*time.Second); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "Insufficient cpu") {
			t.Fatalf("stage whose mounter pod cannot be scheduled: %v %q, want Unavailable with the scheduler's reason", s.Code(), s.Message())
		}
	})
	t.Run("none", func(t *testing.T) {
		if s := stage(t, fake.NewSimpleClientset(), time.Second); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "has not started this volume's mounter") || !strings.Contains(s.Message(), m.PodName()) {
			t.Fatalf("stage with no mounter: %v %q, want Unavailable naming the pod it waited for", s.Code(), s.Message())
		}
	})
}
