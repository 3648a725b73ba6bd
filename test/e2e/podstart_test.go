//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podStarts is how many PVCs the pod start row times.
const podStarts = 10

// From a PVC's creation (with its pod, as `kubectl apply` of both does) to
// the pod Running, for podStarts PVCs one after the other, with where the
// time went: provisioning (the PVC bound), the mounter (from the PVC
// bound to the volume's mounter pod running on the pod's node: the
// scheduler placing the pod, the controller's attachment, csi-attacher's
// ControllerPublishVolume making the mounter pod, and that pod's start),
// and kubelet's stage, publish and container start after it;
// for a StorageClass that binds at once, as the local cluster's, and for
// one that waits for the first consumer (the scheduler then provisions for
// the pod instead of retrying it, with back-off, until its PVC is bound).
// Measured, not asserted (timings depend on the machine): the test fails
// only if a pod does not start.
func TestPodStartTimes(t *testing.T) {
	s := newSuite(t)
	wffc := s.storageClassVariant("wffc", func(sc *storagev1.StorageClass) {
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
	})
	for _, c := range []struct{ what, sc string }{{"Immediate", scBucket}, {"WaitForFirstConsumer", wffc}} {
		s.timePodStarts(c.what, c.sc)
	}
}

// timePodStarts times podStarts pod starts with new PVCs of class sc.
func (s *suite) timePodStarts(what, sc string) {
	s.t.Helper()
	t := s.t
	ctx := s.ctx()
	type phases struct{ bound, mounter, running time.Duration }
	var all []phases
	for i := range podStarts {
		name := fmt.Sprintf("start-%s-%d", strings.ToLower(what[:4]), i)
		t0 := time.Now()
		s.pvc(name, sc, corev1.ReadWriteMany)
		s.pod(name, name, "echo started; sleep 3600", podOpts{})
		var p phases
		handle := ""
		deadline := t0.Add(3 * time.Minute)
		tick := time.NewTicker(50 * time.Millisecond) // each state seen within a poll's period
		for ; p.running == 0; <-tick.C {
			if time.Now().After(deadline) {
				t.Fatalf("pod %s not running 3 minutes after its PVC was made (bound after %v, its mounter running after %v)", name, p.bound, p.mounter)
			}
			since := time.Since(t0)
			if p.bound == 0 {
				if pvc, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, name, metav1.GetOptions{}); err == nil && pvc.Status.Phase == corev1.ClaimBound {
					if pv, err := s.kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{}); err == nil && pv.Spec.CSI != nil {
						p.bound, handle = since, pv.Spec.CSI.VolumeHandle
					}
				}
			}
			pod, err := s.kc.CoreV1().Pods(s.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if p.bound != 0 && p.mounter == 0 && pod.Spec.NodeName != "" {
				if m := s.mountersOf(handle)[pod.Spec.NodeName]; m != nil && containerRuns(m) {
					p.mounter = since
				}
			}
			if pod.Status.Phase == corev1.PodRunning {
				p.running = since
				p.mounter = max(p.mounter, p.bound) // seen in the same poll
			}
		}
		tick.Stop()
		all = append(all, p)
		t.Logf("%s, pod start %2d: running after %5.1fs (bound %4.1fs, mounter running +%4.1fs, staged, published and started +%4.1fs)",
			what, i+1, p.running.Seconds(), p.bound.Seconds(), (p.mounter - p.bound).Seconds(), (p.running - p.mounter).Seconds())
	}
	med := func(f func(phases) time.Duration) time.Duration {
		var xs []time.Duration
		for _, p := range all {
			xs = append(xs, f(p))
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	var running []string
	worst := time.Duration(0)
	for _, p := range all {
		running = append(running, fmt.Sprintf("%.1f", p.running.Seconds()))
		worst = max(worst, p.running)
	}
	t.Logf("pod start, %s, PVC made to pod Running over %d PVCs: p50 %.1fs, max %.1fs (p50 of its parts: provision %.1fs, mounter %.1fs, stage+publish+start %.1fs); all: %s",
		what, len(all), med(func(p phases) time.Duration { return p.running }).Seconds(), worst.Seconds(),
		med(func(p phases) time.Duration { return p.bound }).Seconds(),
		med(func(p phases) time.Duration { return p.mounter - p.bound }).Seconds(),
		med(func(p phases) time.Duration { return p.running - p.mounter }).Seconds(),
		strings.Join(running, " "))
}

// containerRuns says whether a pod's first container runs.
func containerRuns(pod *corev1.Pod) bool {
	cs := pod.Status.ContainerStatuses
	return len(cs) > 0 && cs[0].State.Running != nil
}
