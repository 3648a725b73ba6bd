package lifecycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Finder finds a mounter's live pod: the node plugin's way to find the
// pod that replaced (relaunch.go) the one ControllerPublishVolume named.
// It reads pods, and changes a mounter's image in place (upgrade.go).
type Finder struct {
	Client kubernetes.Interface
	// Namespace is the driver's: where mounters run unless their volume
	// says otherwise (spec.Mounter.NamespaceOr).
	Namespace string
}

// pod gets m's mounter pod, nil when there is none. Outside the
// driver's namespace, where others may create pods, a pod of the
// mounter's name that the driver did not make is an error.
func (f Finder) pod(ctx context.Context, m spec.Mounter) (*corev1.Pod, error) {
	ns := m.NamespaceOr(f.Namespace)
	pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, m.PodName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get mounter pod %s/%s: %w", ns, m.PodName(), err)
	}
	if err := madeOutside(f.Namespace, pod, m); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, pod.Name, err)
	}
	return pod, nil
}

// PodUID is the UID of m's live mounter pod, or "" when there is none.
func (f Finder) PodUID(ctx context.Context, m spec.Mounter) (string, error) {
	pod, err := f.pod(ctx, m)
	if err != nil || pod == nil || !alive(pod) || pod.Annotations[spec.AnnotationVolume] != m.VolumeID {
		return "", err
	}
	return string(pod.UID), nil
}

func (k *Kube) finder() Finder { return Finder{Client: k.Client, Namespace: k.Namespace} }

// running lists the mounter pods that are alive (not finished, and not
// being deleted), by runningKey.
func (k *Kube) running(ctx context.Context) (map[string]bool, error) {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, pod := range pods {
		if alive(pod) {
			out[runningKey(pod.Namespace, pod.Name)] = true
		}
	}
	return out, nil
}

// runningKey names a pod by namespace and name: a pod in one namespace
// never stands in for a mounter that runs in another.
func runningKey(namespace, name string) string { return namespace + "/" + name }

// alive says whether a pod may still serve: not finished, and not being
// deleted (a pod that is gets replaced, not adopted).
func alive(pod *corev1.Pod) bool {
	finished := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	return pod.DeletionTimestamp == nil && !finished
}

// Failure says why the mounter pod of uid does not serve and will not on
// its own, as Launch would say it: it failed (until a person changes
// something, or kubelet restarts it), or it has ended or is going. ""
// while it may yet serve, or when m's pod is another one now, which the
// repair finds.
func (f Finder) Failure(ctx context.Context, m spec.Mounter, uid string) (string, error) {
	pod, err := f.pod(ctx, m)
	if err != nil || pod == nil || string(pod.UID) != uid {
		return "", err
	}
	if !alive(pod) {
		return fmt.Sprintf("mounter pod %s/%s has ended or is being deleted", pod.Namespace, pod.Name), nil
	}
	if reason, failed := failure(pod); failed {
		return fmt.Sprintf("mounter pod %s/%s: %s", pod.Namespace, pod.Name, reason), nil
	}
	return "", nil
}

// Waiting says why the mounter pod of uid does not run yet, as Launch
// would say it (not scheduled and the scheduler's reason, a container
// waiting); "" once it runs, or when m's pod is another one now.
func (f Finder) Waiting(ctx context.Context, m spec.Mounter, uid string) (string, error) {
	pod, err := f.pod(ctx, m)
	if err != nil || pod == nil || string(pod.UID) != uid || started(pod) {
		return "", err
	}
	return fmt.Sprintf("mounter pod %s/%s: %s", pod.Namespace, pod.Name, pending(pod)), nil
}
