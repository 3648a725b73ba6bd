package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Launch starts m's mounter pod with creds in its Secret, or adopts the
// live one, and waits until it runs (see waitStarted).
func (k *Kube) Launch(ctx context.Context, m spec.Mounter, creds map[string][]byte) (string, error) {
	defer k.lock(m)()
	return k.launch(ctx, m, creds)
}

// launch is Launch with m's lock held.
func (k *Kube) launch(ctx context.Context, m spec.Mounter, creds map[string][]byte) (string, error) {
	node, err := k.Client.CoreV1().Nodes().Get(ctx, m.NodeID, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("node %s: %w", m.NodeID, err)
	}
	hostname := node.Labels[corev1.LabelHostname]
	if hostname == "" {
		hostname = node.Name
	}
	ns, err := k.namespaceOf(m)
	if err != nil {
		return "", err
	}
	want, err := k.Template.Pod(m, ns, hostname)
	if err != nil {
		return "", err
	}
	if m.ForPod != "" {
		want.OwnerReferences = nodeOwner(node)
	} else {
		want.OwnerReferences = k.attachmentOwner(ctx, m, node.Name)
	}
	pod, err := k.ensurePod(ctx, m, want)
	if err != nil {
		return "", err
	}
	if err := k.ensureSecret(ctx, m.Secret(pod, creds)); err != nil {
		return "", err
	}
	return k.waitStarted(ctx, pod)
}

// ensurePod creates the pod, or adopts a live one of the same name. A pod
// that has finished or is being deleted is replaced.
func (k *Kube) ensurePod(ctx context.Context, m spec.Mounter, want *corev1.Pod) (*corev1.Pod, error) {
	pods := k.Client.CoreV1().Pods(want.Namespace)
	for {
		pod, err := pods.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			k.Logger.Info("created mounter pod", "pod", pod.Name, "volume", want.Annotations[spec.AnnotationVolume], "node", want.Annotations[spec.AnnotationNode])
			return pod, nil
		}
		if refusedByPolicy(err) {
			return nil, fmt.Errorf("%w: namespace %s does not admit mounter pod %s: %v; raise its quota or limits, or lower the mounter's resources (StorageClass mounterMemoryLimit, mounterCPURequest)", ErrRefused, want.Namespace, want.Name, err)
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create mounter pod %s: %w", want.Name, err)
		}
		pod, err = pods.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get mounter pod %s: %w", want.Name, err)
		}
		if err := madeOutside(k.Namespace, pod, m); err != nil {
			return nil, fmt.Errorf("%w: %v: delete pod %s/%s", ErrFailed, err, pod.Namespace, pod.Name)
		}
		if alive(pod) {
			if pod.Annotations[spec.AnnotationReadOnly] != want.Annotations[spec.AnnotationReadOnly] {
				return nil, fmt.Errorf("%w: mounter pod %s has read-only=%s", ErrIncompatible, pod.Name, pod.Annotations[spec.AnnotationReadOnly])
			}
			return k.adoptOwner(ctx, pod, want.OwnerReferences)
		}
		if err := k.deleteAndWait(ctx, pod.Namespace, pod.Name); err != nil {
			return nil, err
		}
	}
}

func (k *Kube) ensureSecret(ctx context.Context, want *corev1.Secret) error {
	secrets := k.Client.CoreV1().Secrets(want.Namespace)
	_, err := secrets.Create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create mounter secret %s: %w", want.Name, err)
		}
		return nil
	}
	// Left by an earlier pod of the same name, or ours from a retried
	// call: make it ours with today's credentials.
	_, err = secrets.Update(ctx, want, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update mounter secret %s: %w", want.Name, err)
	}
	return nil
}

// waitStarted waits until pod's mounter container runs and returns the
// pod's UID, or returns the reason it will not: a failed container's
// termination message, an image that cannot be pulled, or why the
// scheduler keeps it Pending.
//
// It does not wait for the readiness probe. NodeStageVolume waits for the
// mounter's socket itself (and reads the pod for a crash's reason), while
// kubelet learns that a volume is attached by asking again with back-off
// (after 0.5 s, then doubling): an attach held up to the probe's next
// period, 2 s later, cost pod starts 2 to 4 s more.
func (k *Kube) waitStarted(ctx context.Context, pod *corev1.Pod) (string, error) {
	timeout := k.ReadyTimeout
	deadline := time.Now().Add(timeout)
	for {
		if started(pod) {
			return string(pod.UID), nil
		}
		if reason, failed := failure(pod); failed {
			return "", fmt.Errorf("%w: mounter pod %s/%s: %s", ErrFailed, pod.Namespace, pod.Name, reason)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%w: mounter pod %s/%s not running after %s: %s", ErrNotReady, pod.Namespace, pod.Name, timeout, pending(pod))
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: mounter pod %s/%s: %s (%v)", ErrNotReady, pod.Namespace, pod.Name, pending(pod), ctx.Err())
		case <-time.After(k.Poll):
		}
		p, err := k.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get mounter pod %s: %w", pod.Name, err)
		}
		pod = p
	}
}

// started says whether pod's mounter container runs (or the pod is
// ready, which it is only then), and the pod is not going.
func started(pod *corev1.Pod) bool {
	if !alive(pod) {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == spec.Container && cs.State.Running != nil {
			return true
		}
	}
	return false
}

// failure says whether the mounter cannot serve without a change by a
// person, and why. A mounter that handed its connection over (an
// upgrade) exits too, and is no failure.
func failure(pod *corev1.Pod) (string, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && t.ExitCode != handoff.ExitHandedOver {
			return terminated(t), true
		}
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "CrashLoopBackOff":
				if t := cs.LastTerminationState.Terminated; t != nil {
					if t.ExitCode == handoff.ExitHandedOver {
						continue
					}
					return terminated(t), true
				}
				return w.Reason + ": " + w.Message, true
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError":
				return w.Reason + ": " + w.Message, true
			}
		}
	}
	if pod.Status.Phase == corev1.PodFailed {
		return "pod failed: " + pod.Status.Reason + " " + pod.Status.Message, true
	}
	return "", false
}

func terminated(t *corev1.ContainerStateTerminated) string {
	msg := strings.TrimSpace(t.Message)
	if msg == "" {
		msg = t.Reason
	}
	return fmt.Sprintf("exited with code %d: %s", t.ExitCode, msg)
}

// pending explains a pod that does not run yet.
func pending(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("not scheduled: %s: %s", c.Reason, c.Message)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("container waiting: %s: %s", w.Reason, w.Message)
		}
	}
	return fmt.Sprintf("phase %s, not running", pod.Status.Phase)
}

// ErrRefused: the namespace's ResourceQuota or LimitRange refuses the
// mounter pod; a person must change one or the other.
var ErrRefused = errors.New("mounter pod refused")

// refusedByPolicy says whether a create failed on the namespace's
// ResourceQuota or LimitRange (the API answers Forbidden for both).
func refusedByPolicy(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"exceeded quota", "must specify", "maximum ", "minimum ", "LimitRange", "limitrange"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
