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
	Client    kubernetes.Interface
	Namespace string // of the mounter pods
}

// PodUID is the UID of m's live mounter pod, or "" when there is none.
func (f Finder) PodUID(ctx context.Context, m spec.Mounter) (string, error) {
	pod, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, m.PodName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get mounter pod %s: %w", m.PodName(), err)
	}
	if !alive(pod) || pod.Annotations[spec.AnnotationVolume] != m.VolumeID {
		return "", nil
	}
	return string(pod.UID), nil
}

func (k *Kube) finder() Finder { return Finder{Client: k.Client, Namespace: k.Namespace} }

// running lists the keys (spec.Mounter.Key) of the mounter pods that
// are alive: not finished, and not being deleted.
func (k *Kube) running(ctx context.Context) (map[string]bool, error) {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, pod := range pods {
		if alive(pod) {
			out[pod.Labels[spec.LabelKey]] = true
		}
	}
	return out, nil
}

// alive says whether a pod may still serve: not finished, and not being
// deleted (a pod that is gets replaced, not adopted).
func alive(pod *corev1.Pod) bool {
	finished := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	return pod.DeletionTimestamp == nil && !finished
}
