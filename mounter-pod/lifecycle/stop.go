package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Stop deletes m's mounter pod, once it has drained, and its Secret.
// ControllerUnpublishVolume does not say where the volume's mounters
// run: its PersistentVolume does, and where that is gone, the mounter is
// looked for in each namespace mounters may run in.
//
// A mounter that a pod on its node still uses is kept (an error, which
// csi-attacher retries): the controller deletes an attachment from a
// cache that may lag behind a pod just scheduled there, whose stage then
// found the mounter by name.
func (k *Kube) Stop(ctx context.Context, m spec.Mounter) error {
	if pv := k.persistentVolumeOf(m.VolumeID); pv != nil {
		user, err := k.userOn(ctx, pv.Name, m.NodeID)
		if err != nil {
			return fmt.Errorf("look for pods that use the volume on node %s: %w", m.NodeID, err)
		}
		if user != "" {
			return fmt.Errorf("pod %s on node %s uses the volume: its mounter is kept until no pod there does", user, m.NodeID)
		}
	}
	defer k.lock(m)()
	namespaces := k.namespaces()
	if ns, ok := k.mounterNamespace(m); ok {
		namespaces = []string{ns}
	}
	for _, ns := range namespaces {
		if err := k.stopIn(ctx, ns, m); err != nil && !k.forbiddenElsewhere(ns, err) {
			return err
		}
	}
	return nil
}

// stopIn deletes m's mounter pod and Secret in namespace ns.
func (k *Kube) stopIn(ctx context.Context, ns string, m spec.Mounter) error {
	if err := k.deleteAndWait(ctx, ns, m.PodName()); err != nil {
		return err
	}
	err := k.Client.CoreV1().Secrets(ns).Delete(ctx, m.SecretName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete mounter secret %s/%s: %w", ns, m.SecretName(), err)
	}
	return nil
}

// deleteAndWait deletes a pod gracefully (the mounter drains on SIGTERM)
// and waits until it is gone.
func (k *Kube) deleteAndWait(ctx context.Context, namespace, name string) error {
	pods := k.Client.CoreV1().Pods(namespace)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete mounter pod %s/%s: %w", namespace, name, err)
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
		case <-time.After(k.Poll):
		}
	}
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

// mounterNamespace is where m's pods run, from m or its volume's
// PersistentVolume in the cache; ok is false when neither says.
func (k *Kube) mounterNamespace(m spec.Mounter) (string, bool) {
	if m.Volume.Mounter.Namespace != "" {
		return m.Volume.Mounter.Namespace, true
	}
	pv := k.persistentVolumeOf(m.VolumeID)
	if pv == nil {
		return "", false
	}
	v, err := k.volumeOf(pv.Spec.CSI)
	if err != nil {
		return "", false
	}
	return spec.Mounter{Volume: v}.NamespaceOr(k.Namespace), true
}

// userOn names a pod on node, not finished, that uses PersistentVolume
// pv through a claim, as the API says now; "" when there is none, or the
// node is gone (its pods never finish).
func (k *Kube) userOn(ctx context.Context, pv, node string) (string, error) {
	if k.nodeGone(ctx, node) {
		return "", nil
	}
	pods, err := k.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return "", fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != node || finished(&pod) {
			continue
		}
		for _, claim := range claimsOf(&pod) {
			pvc, err := k.Client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("claim %s/%s of pod %s: %w", pod.Namespace, claim, pod.Name, err)
			}
			if pvc.Spec.VolumeName == pv {
				return pod.Namespace + "/" + pod.Name, nil
			}
		}
	}
	return "", nil
}

// persistentVolumeOf is the cached PersistentVolume of this driver whose
// volume handle is id; nil when there is none or no cache.
func (k *Kube) persistentVolumeOf(id string) *corev1.PersistentVolume {
	c := k.cache.Load()
	if c == nil {
		return nil
	}
	pvs, err := c.pvs.List(labels.Everything())
	if err != nil {
		return nil
	}
	for _, pv := range pvs {
		if c := pv.Spec.CSI; c != nil && c.Driver == k.Driver && c.VolumeHandle == id {
			return pv
		}
	}
	return nil
}
