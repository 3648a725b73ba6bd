package lifecycle_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

const ns = "objfuse-system"

func kubeLauncher(t *testing.T, tune ...func(*lifecycle.Config)) (*lifecycle.Kube, *fake.Clientset) {
	t.Helper()
	kc := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "node-a", Labels: map[string]string{corev1.LabelHostname: "host-a"},
	}})
	tmpl := spec.Template{
		Image: "objfuse:test", PriorityClassName: "objfuse-mounter",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
	}
	cfg := lifecycle.Config{Client: kc, Namespace: ns, Template: tmpl, ReadyTimeout: 2 * time.Second, Poll: 10 * time.Millisecond, Logger: slog.Default()}
	for _, f := range tune {
		f(&cfg)
	}
	return lifecycle.NewKube(cfg), kc
}

func testMounter() spec.Mounter {
	return spec.Mounter{VolumeID: "objfuse1|http://s3:9000|us-east-1|true|pvc-1|", NodeID: "node-a", Volume: volume.Volume{
		ID: volume.ID{S3: volume.S3{Endpoint: "http://s3:9000", Region: "us-east-1", PathStyle: true}, Bucket: "pvc-1"},
	}}
}

// setStatus plays kubelet: the pod is created with this status.
func setStatus(t *testing.T, kc *fake.Clientset, name string, st corev1.PodStatus) {
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Status = st
		p.UID = types.UID("11111111-2222-3333-4444-555555555555")
		p.CreationTimestamp = metav1.Now()
		return false, nil, nil // let the tracker store it
	})
}

func TestKubeLaunchReady(t *testing.T) {
	k, kc := kubeLauncher(t)
	m := testMounter()
	secret := "s3cr3t-value"
	setStatus(t, kc, m.PodName(), corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	uid, err := k.Launch(context.Background(), m, map[string][]byte{"accessKeyID": []byte("AK"), "secretAccessKey": []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	if uid != "11111111-2222-3333-4444-555555555555" {
		t.Fatalf("uid %q", uid)
	}
	pod, err := kc.CoreV1().Pods(ns).Get(context.Background(), m.PodName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkPodIsUnprivileged(t, pod, secret)
	if got := pod.Spec.NodeSelector[corev1.LabelHostname]; got != "host-a" {
		t.Errorf("node selector %q, want the node's hostname label host-a", got)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("tolerations %v, want tolerate everything", pod.Spec.Tolerations)
	}
	if pod.Spec.PriorityClassName != "objfuse-mounter" {
		t.Errorf("priority class %q", pod.Spec.PriorityClassName)
	}
	c := pod.Spec.Containers[0]
	if env := envOf(c, "GOMEMLIMIT"); env != "241591910" {
		t.Errorf("GOMEMLIMIT %q, want 90%% of 256Mi", env)
	}
	if c.LivenessProbe != nil || c.ReadinessProbe == nil {
		t.Errorf("want a readiness probe and no liveness probe (a restart breaks mounts)")
	}
	sec, err := kc.CoreV1().Secrets(ns).Get(context.Background(), m.SecretName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Name != pod.Name || sec.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("secret owners %v, want the mounter pod", sec.OwnerReferences)
	}
	if string(sec.Data["secretAccessKey"]) != secret {
		t.Errorf("secret does not hold the credentials")
	}
}

func checkPodIsUnprivileged(t *testing.T, pod *corev1.Pod, secret string) {
	t.Helper()
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod must run as non-root: %+v", psc)
	}
	if pod.Spec.HostPID || pod.Spec.HostIPC {
		t.Errorf("pod shares host namespaces")
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("pod gets an API token it does not need")
	}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath", v.Name)
		}
	}
	for _, c := range pod.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s may be privileged: %+v", c.Name, sc)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s capabilities %+v, want drop ALL", c.Name, sc.Capabilities)
		}
		for _, e := range c.Env {
			if strings.Contains(e.Value, secret) || e.ValueFrom != nil {
				t.Errorf("env %s carries a secret", e.Name)
			}
		}
		for _, a := range append(c.Command, c.Args...) {
			if strings.Contains(a, secret) || strings.Contains(a, "AK") && !strings.Contains(a, "--") {
				t.Errorf("argument %q carries a secret", a)
			}
		}
	}
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// Launch returns once the mounter's container runs, before its readiness
// probe has passed (NodeStageVolume waits for its socket): kubelet asks
// whether a volume is attached with back-off, so every second Launch
// waits more can cost a pod start two.
func TestKubeLaunchReturnsOnceTheMounterRuns(t *testing.T) {
	k, kc := kubeLauncher(t)
	m := testMounter()
	setStatus(t, kc, m.PodName(), corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: spec.Container, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	})
	uid, err := k.Launch(context.Background(), m, map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("b")})
	if err != nil || uid != "11111111-2222-3333-4444-555555555555" {
		t.Fatalf("launch of a running, not yet ready mounter: %q, %v", uid, err)
	}
}

// Why a mounter is not ready reaches the caller: the scheduler's reason
// for a Pending pod, a crashed mounter's termination message.
func TestKubeLaunchReasons(t *testing.T) {
	tests := []struct {
		name   string
		status corev1.PodStatus
		want   error
		says   string
	}{
		{"pending: insufficient memory", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory.",
		}}}, lifecycle.ErrNotReady, "Insufficient memory"},
		{"image missing", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: `image "objfuse:test" is not present`}},
		}}}, lifecycle.ErrFailed, "ErrImageNeverPull"},
		{"bad credentials", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "http://s3:9000 does not know the access key (InvalidAccessKeyId)"}},
		}}}, lifecycle.ErrFailed, "InvalidAccessKeyId"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, kc := kubeLauncher(t)
			m := testMounter()
			setStatus(t, kc, m.PodName(), tc.status)
			_, err := k.Launch(context.Background(), m, map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("b")})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
}

// A mounter the template cannot make (here: no staging room beside the
// read cache) is a failure with the reason, and no pod is created.
func TestKubeLaunchImpossibleMounter(t *testing.T) {
	k, kc := kubeLauncher(t, func(c *lifecycle.Config) { c.Template.StagingSizeLimit = "1Gi" })
	m := testMounter()
	m.Volume.Mount = volume.MountOptions{volume.ParamReadCacheMiB: "1000"}
	_, err := k.Launch(context.Background(), m, nil)
	if !errors.Is(err, spec.ErrUnfit) || !strings.Contains(err.Error(), "stagingSizeLimit 1Gi") || !strings.Contains(err.Error(), "readCacheMiB 1000") {
		t.Fatalf("Launch: %v, want ErrUnfit naming stagingSizeLimit and readCacheMiB", err)
	}
	pods, _ := kc.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Fatalf("%d pods created for a mounter that cannot run", len(pods.Items))
	}
}

func TestKubeLaunchUnknownNode(t *testing.T) {
	k, _ := kubeLauncher(t)
	ok, err := k.NodeExists(context.Background(), "node-b")
	if err != nil || ok {
		t.Fatalf("NodeExists(node-b) = %v, %v", ok, err)
	}
}

func TestKubeStopAndOrphans(t *testing.T) {
	k, kc := kubeLauncher(t)
	m := testMounter()
	setStatus(t, kc, m.PodName(), corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
	if _, err := k.Launch(context.Background(), m, map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("b")}); err != nil {
		t.Fatal(err)
	}
	// Attached: kept.
	n, err := lifecycle.DeleteOrphans(context.Background(), k, 0, func(o spec.Mounter) bool { return o.Key() == m.Key() })
	if err != nil || n != 0 {
		t.Fatalf("collected %d (%v) while attached", n, err)
	}
	// Not attached, but younger than the grace period: kept.
	detached := func(spec.Mounter) bool { return false }
	if n, _ := lifecycle.DeleteOrphans(context.Background(), k, time.Hour, detached); n != 0 {
		t.Fatalf("collected a young pod")
	}
	// The check and the delete happen under the mounter's lock.
	var locked []spec.Mounter
	underLock := func(o spec.Mounter) bool {
		if lifecycle.Locked(k, o) {
			locked = append(locked, o)
		}
		return false
	}
	if n, _ := lifecycle.DeleteOrphans(context.Background(), k, 0, underLock); n != 1 || len(locked) != 1 || locked[0].Key() != m.Key() {
		t.Fatalf("collected %d orphans under locks %v, want 1 under %v", n, locked, m)
	}
	if err := k.Stop(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Secrets(ns).Get(context.Background(), m.SecretName(), metav1.GetOptions{}); err == nil {
		t.Fatal("secret left after Stop")
	}
	if err := k.Stop(context.Background(), m); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
