package driver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// A check's decision about a mounter's image: only a mounter in
// takeover mode is upgraded in place, one at a time per node and not
// again soon after a failure; one in repair mode is told of once; one
// on the driver's image, or stopping, is left be.
func TestDecideUpgrade(t *testing.T) {
	const old, next = "objfuse:1", "objfuse:2"
	takeover, repair := handoff.ModeTakeover, handoff.ModeRepair
	cases := []struct {
		name string
		c    upgradeCase
		want upgradeStep
	}{
		{"takeover, older image", upgradeCase{want: next, image: old, mode: takeover}, upgradeStart},
		{"the driver's image", upgradeCase{want: next, image: next, mode: takeover}, upgradeNothing},
		{"no image known", upgradeCase{want: "", image: old, mode: takeover}, upgradeNothing},
		{"pod's image not read", upgradeCase{want: next, image: "", mode: takeover}, upgradeNothing},
		{"another under way", upgradeCase{want: next, image: old, mode: takeover, busy: true}, upgradeNothing},
		{"failed lately", upgradeCase{want: next, image: old, mode: takeover, backingOff: true}, upgradeNothing},
		{"stopping", upgradeCase{want: next, image: old, mode: takeover, stopping: true}, upgradeNothing},
		{"repair mode", upgradeCase{want: next, image: old, mode: repair}, upgradeTellRepair},
		{"repair mode, busy node", upgradeCase{want: next, image: old, mode: repair, busy: true}, upgradeTellRepair},
		{"repair mode, told", upgradeCase{want: next, image: old, mode: repair, told: true}, upgradeNothing},
		{"repair mode, the driver's image", upgradeCase{want: next, image: next, mode: repair}, upgradeNothing},
		{"mode not known yet", upgradeCase{want: next, image: old, mode: ""}, upgradeTellRepair},
	}
	for _, tc := range cases {
		if got := decideUpgrade(tc.c); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// An upgrade under way is done only when a new container serves (the
// old one serves until kubelet stops it), ends when its pod or volume
// goes, and fails at upgradeBound.
func TestDecideUpgradeDone(t *testing.T) {
	cases := []struct {
		name   string
		p      upgradeProgress
		waited time.Duration
		want   upgradeOutcome
	}{
		{"old container serving", upgradeProgress{serving: true}, time.Second, upgradeWaiting},
		{"new container, not serving yet", upgradeProgress{newContainer: true}, time.Second, upgradeWaiting},
		{"new container serving", upgradeProgress{newContainer: true, serving: true}, time.Second, upgradeDone},
		{"new container serving, late", upgradeProgress{newContainer: true, serving: true}, 2 * upgradeBound, upgradeDone},
		{"pod gone", upgradeProgress{gone: true}, time.Second, upgradeEnded},
		{"not serving at the bound", upgradeProgress{newContainer: true}, upgradeBound, upgradeTimedOut},
		{"old container at the bound", upgradeProgress{serving: true}, upgradeBound, upgradeTimedOut},
	}
	for _, tc := range cases {
		if got := decideUpgradeDone(tc.p, tc.waited); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

const (
	oldImage = "objfuse:old"
	newImage = "objfuse:new"
)

// upgradeEnv is a takeover env whose node plugin knows the API (a fake
// with the mounter pod, on oldImage) and the mounters' image newImage.
type upgradeEnv struct {
	*takeoverEnv
	kc  *fake.Clientset
	pod spec.Mounter
}

func newUpgradeEnv(t *testing.T, takeover bool) *upgradeEnv {
	e := &upgradeEnv{takeoverEnv: newTakeoverEnv(t, takeover), pod: spec.Mounter{VolumeID: "vol", NodeID: "n"}}
	e.kc = fake.NewSimpleClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: e.pod.PodName(), Namespace: "objfuse-system", UID: types.UID(mounterUID),
			Annotations: map[string]string{spec.AnnotationVolume: "vol"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: spec.Container, Image: oldImage}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: spec.Container, ContainerID: "containerd://1", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	})
	e.opts.KubeClient, e.opts.Namespace, e.opts.MounterImage = e.kc, "objfuse-system", newImage
	e.restartNode()
	return e
}

func (e *upgradeEnv) podImage() string {
	p, err := e.kc.CoreV1().Pods("objfuse-system").Get(context.Background(), e.pod.PodName(), metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Spec.Containers[0].Image
}

// restartContainer is kubelet starting the new image in the pod: a
// mounter that can resume the kept connection, in a new container.
func (e *upgradeEnv) restartContainer() {
	e.restartMounter(true)
	p, _ := e.kc.CoreV1().Pods("objfuse-system").Get(context.Background(), e.pod.PodName(), metav1.GetOptions{})
	p.Status.ContainerStatuses[0].ContainerID = "containerd://2"
	if _, err := e.kc.CoreV1().Pods("objfuse-system").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// The mount is not made to hang: the node hands the connection over
	// without waiting for a check of the mount to time out.
}

// requestsOf are the mounter's requests of op.
func (m *fakeMounter) requestsOf(op string) []handoff.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(m.requests), func(r handoff.Request) bool { return r.Op != op })
}

func (e *upgradeEnv) upgrades(result string) float64 {
	var m dto.Metric
	e.d.metrics.upgrades.WithLabelValues(result).Write(&m)
	return m.GetCounter().GetValue()
}

// The node arms its mounter's hand-over, then sets its pod's image;
// once the new container took the connection over and serves, the pods
// are told, and nothing more happens.
func TestAMounterIsUpgradedInPlace(t *testing.T) {
	e := newUpgradeEnv(t, true)
	e.reconcile()
	armed := e.mounter.requestsOf(handoff.OpHandOver)
	if len(armed) != 1 || !armed[0].AtSignal {
		t.Fatalf("hand-over requests %+v, want one armed at the signal", armed)
	}
	if img := e.podImage(); img != newImage {
		t.Fatalf("pod image %s, want %s", img, newImage)
	}
	e.reconcile() // the old container still serves: not done
	if r := e.told(); len(r) != 0 {
		t.Fatalf("Events %q before the new container serves", r)
	}
	e.restartContainer()
	e.reconcile()
	if r := e.told(); !slices.Equal(r, []string{reasonTakenOver, reasonUpgraded}) {
		t.Fatalf("Events %q, want %s then %s", r, reasonTakenOver, reasonUpgraded)
	}
	if msg := e.toldAbout(reasonUpgraded); !strings.Contains(msg, oldImage) || !strings.Contains(msg, newImage) {
		t.Fatalf("the Event does not name both images: %s", msg)
	}
	if n := e.upgrades("handed_over"); n != 1 {
		t.Fatalf("%v upgrades counted, want 1", n)
	}
	e.reconcile()
	e.reconcile()
	if n := e.mounter.asked(handoff.OpHandOver); n != 0 {
		t.Fatalf("the new mounter was asked to hand over %d times", n)
	}
	if len(e.told()) != 2 {
		t.Fatalf("Events %q after the upgrade", e.told())
	}
}

// A mounter in repair mode (here: the node keeps no connection) is not
// touched; its pods are told once that new pods get the new image.
func TestARepairModeMounterIsLeftToNewPods(t *testing.T) {
	e := newUpgradeEnv(t, false)
	e.reconcile()
	e.reconcile()
	if n := e.mounter.asked(handoff.OpHandOver); n != 0 {
		t.Fatalf("asked a repair-mode mounter to hand over %d times", n)
	}
	if img := e.podImage(); img != oldImage {
		t.Fatalf("pod image %s, want %s kept", img, oldImage)
	}
	if r := e.told(); !slices.Equal(r, []string{reasonUpgradeLater}) {
		t.Fatalf("Events %q, want one %s", r, reasonUpgradeLater)
	}
}

// When the API refuses the new image after the mounter was armed, the
// pods hear of it once, and the node does not try again at every check.
func TestAFailedUpgradeIsToldAndNotRetriedAtOnce(t *testing.T) {
	e := newUpgradeEnv(t, true)
	e.kc.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	e.reconcile()
	e.reconcile()
	if n := e.mounter.asked(handoff.OpHandOver); n != 1 {
		t.Fatalf("armed %d times, want once", n)
	}
	if r := e.told(); !slices.Equal(r, []string{reasonUpgradeFailed}) {
		t.Fatalf("Events %q, want one %s", r, reasonUpgradeFailed)
	}
	if msg := e.toldAbout(reasonUpgradeFailed); !strings.Contains(msg, "forbidden") {
		t.Fatalf("the Event does not say why: %s", msg)
	}
	if n := e.upgrades("failed"); n != 1 {
		t.Fatalf("%v failures counted, want 1", n)
	}
	if e.d.node.upgrades.running != nil {
		t.Fatal("a failed upgrade holds up the node's next one")
	}
	// Due again: tried again, and the next retry waits twice as long.
	for i, want := range []time.Duration{upgradeRetry, 2 * upgradeRetry} {
		note := e.d.node.upgrades.notes["vol"]
		if wait := time.Until(note.retryAt); wait > want || wait < want-5*time.Second {
			t.Fatalf("after failure %d the retry is due in %v, want %v", i+1, wait, want)
		}
		note.retryAt = time.Now().Add(-time.Second)
		e.d.node.upgrades.notes["vol"] = note
		e.reconcile()
		if n := e.mounter.asked(handoff.OpHandOver); n != i+2 {
			t.Fatalf("armed %d times once the retry was due, want %d", n, i+2)
		}
	}
}

// Retries wait twice as long after each failure, never over the cap.
func TestRetryAfterDoubles(t *testing.T) {
	for failed, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 5: 160 * time.Second, 6: upgradeRetryMax, 40: upgradeRetryMax} {
		if got := retryAfter(failed); got != want {
			t.Errorf("after %d failures: %v, want %v", failed, got, want)
		}
	}
}

// A new container that does not serve within upgradeBound is reported,
// and the node moves on.
func TestAnUpgradeThatDoesNotServeIsReported(t *testing.T) {
	e := newUpgradeEnv(t, true)
	e.reconcile()
	run := e.d.node.upgrades.running
	if run == nil {
		t.Fatal("no upgrade under way")
	}
	run.since = time.Now().Add(-upgradeBound)
	e.reconcile()
	if r := e.told(); !slices.Equal(r, []string{reasonUpgradeFailed}) {
		t.Fatalf("Events %q, want one %s", r, reasonUpgradeFailed)
	}
	if e.d.node.upgrades.running != nil {
		t.Fatal("the node still waits for it")
	}
}

// A node plugin that stops while an upgrade is under way goes on
// checking until the new container took the connection over (the
// connection lives only in the node plugin meanwhile), and starts none.
func TestAStoppingNodePluginFinishesTheUpgradeUnderWay(t *testing.T) {
	e := newUpgradeEnv(t, true)
	e.reconcile()
	if e.d.node.upgrades.running == nil {
		t.Fatal("no upgrade under way")
	}
	e.restartContainer()
	e.d.node.finishUpgrade()
	if r := e.told(); !slices.Equal(r, []string{reasonTakenOver, reasonUpgraded}) {
		t.Fatalf("Events %q, want %s then %s", r, reasonTakenOver, reasonUpgraded)
	}
	if !e.d.node.upgrades.stopping || decideUpgrade(upgradeCase{want: newImage, image: oldImage, mode: handoff.ModeTakeover, busy: e.d.node.upgrades.stopping}) != upgradeNothing {
		t.Fatal("a stopping node plugin would start another upgrade")
	}
}

// setRestarts makes the mounter pod's container one kubelet restarted
// restarts times, the last container having ended ago.
func (e *upgradeEnv) setRestarts(restarts int32, ago time.Duration) {
	e.t.Helper()
	p, _ := e.kc.CoreV1().Pods("objfuse-system").Get(context.Background(), e.pod.PodName(), metav1.GetOptions{})
	p.Status.ContainerStatuses[0].RestartCount = restarts
	p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: handoff.ExitHandedOver, FinishedAt: metav1.NewTime(time.Now().Add(-ago))}
	if _, err := e.kc.CoreV1().Pods("objfuse-system").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// A mounter whose container kubelet restarted twice or more, lately, is
// not upgraded until kubelet's crash-loop back-off cannot hold its new
// container (the pods would wait for it): its pods are told when it
// will be, once; then it is. One restarted once is upgraded at once (a
// roll-back right after an upgrade).
func TestAnUpgradeWaitsOutKubeletsBackOff(t *testing.T) {
	e := newUpgradeEnv(t, true)
	e.setRestarts(2, time.Minute)
	e.reconcile()
	e.reconcile()
	if n := e.mounter.asked(handoff.OpHandOver); n != 0 || e.podImage() != oldImage {
		t.Fatalf("armed %d times, image %s: upgraded while kubelet may hold the new container back", n, e.podImage())
	}
	if r := e.told(); !slices.Equal(r, []string{reasonUpgradeDeferred}) {
		t.Fatalf("Events %q, want one %s", r, reasonUpgradeDeferred)
	}
	if msg := e.toldAbout(reasonUpgradeDeferred); !strings.Contains(msg, "restarted 2 times") || !strings.Contains(msg, oldImage) {
		t.Fatalf("the Event does not say why: %s", msg)
	}
	// The back-off passed.
	e.setRestarts(2, 6*time.Minute)
	note := e.d.node.upgrades.notes["vol"]
	note.retryAt = time.Now().Add(-time.Second)
	e.d.node.upgrades.notes["vol"] = note
	e.reconcile()
	if n := e.mounter.asked(handoff.OpHandOver); n != 1 || e.podImage() != newImage {
		t.Fatalf("armed %d times, image %s, once kubelet's back-off passed", n, e.podImage())
	}

	once := newUpgradeEnv(t, true)
	once.setRestarts(1, time.Second)
	once.reconcile()
	if once.podImage() != newImage {
		t.Fatalf("a mounter restarted once was not upgraded: image %s", once.podImage())
	}
}
