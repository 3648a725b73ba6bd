package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Kube runs each mounter as a pod in the driver's namespace.
type Kube struct {
	Client    kubernetes.Interface
	Namespace string
	Template  spec.Template
	// ReadyTimeout bounds Launch's wait for the pod to be ready.
	ReadyTimeout time.Duration
	// Poll is how often the pod is checked; tests shorten it.
	Poll   time.Duration
	Logger *slog.Logger
	// Pods and Secrets, when set, are watch-fed listers of the mounter
	// pods and Secrets in Namespace, which the periodic passes (orphans,
	// credentials, relaunches) read instead of asking the API server.
	Pods    corelisters.PodNamespaceLister
	Secrets corelisters.SecretNamespaceLister
}

// mounterPods lists the mounter pods, from the lister when there is one.
// They are shared with the lister's cache: not to be changed.
func (k *Kube) mounterPods(ctx context.Context) ([]*corev1.Pod, error) {
	selector := spec.LabelComponent + "=" + spec.ComponentMounter
	if k.Pods != nil {
		sel, err := labels.Parse(selector)
		if err != nil {
			return nil, err
		}
		return k.Pods.List(sel)
	}
	list, err := k.Client.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list mounter pods: %w", err)
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// mounterSecret gets a mounter's Secret, from the lister when there is
// one, as a copy the caller may change.
func (k *Kube) mounterSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	if k.Secrets != nil {
		s, err := k.Secrets.Get(name)
		if err != nil {
			return nil, err
		}
		return s.DeepCopy(), nil
	}
	return k.Client.CoreV1().Secrets(k.Namespace).Get(ctx, name, metav1.GetOptions{})
}

func (k *Kube) poll() time.Duration {
	if k.Poll == 0 {
		return 500 * time.Millisecond
	}
	return k.Poll
}

func (k *Kube) NodeExists(ctx context.Context, nodeID string) (bool, error) {
	_, err := k.Client.CoreV1().Nodes().Get(ctx, nodeID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func (k *Kube) Launch(ctx context.Context, m spec.Mounter, creds map[string][]byte) (string, error) {
	node, err := k.Client.CoreV1().Nodes().Get(ctx, m.NodeID, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("node %s: %w", m.NodeID, err)
	}
	hostname := node.Labels[corev1.LabelHostname]
	if hostname == "" {
		hostname = node.Name
	}
	want, err := k.Template.Pod(m, k.Namespace, hostname)
	if err != nil {
		return "", err
	}
	pod, err := k.ensurePod(ctx, want)
	if err != nil {
		return "", err
	}
	if err := k.ensureSecret(ctx, m.Secret(pod, creds)); err != nil {
		return "", err
	}
	return k.waitReady(ctx, pod)
}

// ensurePod creates the pod, or adopts a live one of the same name. A pod
// that has finished or is being deleted is replaced.
func (k *Kube) ensurePod(ctx context.Context, want *corev1.Pod) (*corev1.Pod, error) {
	pods := k.Client.CoreV1().Pods(k.Namespace)
	for {
		pod, err := pods.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			k.Logger.Info("created mounter pod", "pod", pod.Name, "volume", want.Annotations[spec.AnnotationVolume], "node", want.Annotations[spec.AnnotationNode])
			return pod, nil
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
		if alive(pod) {
			if pod.Annotations[spec.AnnotationReadOnly] != want.Annotations[spec.AnnotationReadOnly] {
				return nil, fmt.Errorf("%w: mounter pod %s has read-only=%s", ErrIncompatible, pod.Name, pod.Annotations[spec.AnnotationReadOnly])
			}
			return pod, nil
		}
		if err := k.deleteAndWait(ctx, pod.Name); err != nil {
			return nil, err
		}
	}
}

func (k *Kube) ensureSecret(ctx context.Context, want *corev1.Secret) error {
	secrets := k.Client.CoreV1().Secrets(k.Namespace)
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

// waitReady waits until pod is ready and returns its UID, or returns the
// reason it will not be: a failed container's termination message, an
// image that cannot be pulled, or why the scheduler keeps it Pending.
func (k *Kube) waitReady(ctx context.Context, pod *corev1.Pod) (string, error) {
	timeout := k.ReadyTimeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		if ready(pod) {
			return string(pod.UID), nil
		}
		if reason, failed := failure(pod); failed {
			return "", fmt.Errorf("%w: mounter pod %s/%s: %s", ErrFailed, pod.Namespace, pod.Name, reason)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%w: mounter pod %s/%s not ready after %s: %s", ErrNotReady, pod.Namespace, pod.Name, timeout, pending(pod))
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: mounter pod %s/%s: %s (%v)", ErrNotReady, pod.Namespace, pod.Name, pending(pod), ctx.Err())
		case <-time.After(k.poll()):
		}
		p, err := k.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get mounter pod %s: %w", pod.Name, err)
		}
		pod = p
	}
}

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// failure says whether the mounter cannot become ready without a change
// by a person, and why.
func failure(pod *corev1.Pod) (string, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return terminated(t), true
		}
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "CrashLoopBackOff":
				if t := cs.LastTerminationState.Terminated; t != nil {
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

// pending explains a pod that is not ready yet.
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
	return fmt.Sprintf("phase %s, not ready", pod.Status.Phase)
}

func (k *Kube) Stop(ctx context.Context, m spec.Mounter) error {
	if err := k.deleteAndWait(ctx, m.PodName()); err != nil {
		return err
	}
	err := k.Client.CoreV1().Secrets(k.Namespace).Delete(ctx, m.SecretName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete mounter secret %s: %w", m.SecretName(), err)
	}
	return nil
}

// deleteAndWait deletes a pod gracefully (the mounter drains on SIGTERM)
// and waits until it is gone.
func (k *Kube) deleteAndWait(ctx context.Context, name string) error {
	pods := k.Client.CoreV1().Pods(k.Namespace)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete mounter pod %s: %w", name, err)
	}
	for {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil && k.nodeGone(ctx, pod.Spec.NodeName) {
			// A pod on a dead node stays Terminating for ever; its mounts
			// died with the node, so nothing is left to drain.
			k.Logger.Warn("mounter pod's node is not ready; deleting it at once", "pod", name, "node", pod.Spec.NodeName)
			err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("force-delete mounter pod %s: %w", name, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mounter pod %s still terminating: %w", name, ctx.Err())
		case <-time.After(k.poll()):
		}
	}
}

// CollectOrphans deletes mounter pods older than minAge whose (volume,
// node) pair attached() no longer knows: left behind when a
// ControllerUnpublish never came (a deleted VolumeAttachment, a crash).
// lock, when set, is held from attached() to the delete, so that a
// publish that adopts the pod meanwhile (under the same lock) is not
// undone; the delete names the pod's UID, so that a new pod of the same
// name is not taken for it.
func (k *Kube) CollectOrphans(ctx context.Context, minAge time.Duration, attached func(m spec.Mounter) bool, lock func(m spec.Mounter) (unlock func())) (int, error) {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, pod := range pods {
		m := spec.Mounter{VolumeID: pod.Annotations[spec.AnnotationVolume], NodeID: pod.Annotations[spec.AnnotationNode]}
		if m.VolumeID == "" || pod.DeletionTimestamp != nil || time.Since(pod.CreationTimestamp.Time) < minAge {
			continue
		}
		deleted, err := k.collectOrphan(ctx, pod, m, attached, lock)
		if err != nil {
			errs = append(errs, err)
		}
		if deleted {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (k *Kube) collectOrphan(ctx context.Context, pod *corev1.Pod, m spec.Mounter, attached func(spec.Mounter) bool, lock func(spec.Mounter) func()) (bool, error) {
	if lock != nil {
		defer lock(m)()
	}
	if attached(m) {
		return false, nil
	}
	k.Logger.Info("deleting orphaned mounter pod", "pod", pod.Name, "volume", m.VolumeID, "node", m.NodeID)
	uid := pod.UID
	err := k.Client.CoreV1().Pods(k.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil // gone, or another pod by now
	case err != nil:
		return false, fmt.Errorf("delete orphaned mounter pod %s: %w", pod.Name, err)
	}
	return true, nil
}

// nodeGone says whether a node is missing or not Ready.
func (k *Kube) nodeGone(ctx context.Context, name string) bool {
	if name == "" {
		return false // not scheduled yet: deletion is immediate anyway
	}
	node, err := k.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return true
}
