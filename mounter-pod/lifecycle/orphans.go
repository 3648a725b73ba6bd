package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// orphanAge is how old a mounter pod must be before it may be collected:
// older than any ControllerPublish that could still be creating it.
const orphanAge = 5 * time.Minute

// collectOrphans deletes mounter pods no VolumeAttachment accounts for,
// and those of inline volumes whose pod is gone or finished;
// Run runs it every orphanCheckEvery. It reads the cluster cache, and
// asks the API only when the cache says a pod is an orphan: a get of
// every attachment's PV each minute would use up the client's rate
// limit, which CSI calls share. That check and the delete hold the
// mounter's lock, so that a Launch adopting the pod meanwhile (its
// attachment too new for the cache) is seen, not undone.
func (k *Kube) collectOrphans(ctx context.Context) (int, error) {
	cachedVAs, err := k.cache.Load().vas.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("list cached attachments: %w", err)
	}
	cached, err := k.attachmentsOf(cachedVAs, k.cache.Load().pvs.Get)
	if err != nil {
		return 0, fmt.Errorf("cached attachments: %w", err)
	}
	attached := func(m spec.Mounter) bool {
		if m.ForPod != "" {
			return k.inlineWanted(ctx, m.ForPod)
		}
		if cached[attachmentKey(m.VolumeID, m.NodeID)] {
			return true
		}
		fresh, err := k.freshAttachments(ctx)
		if err != nil {
			k.Logger.Warn("orphan collection: list attachments", "err", err)
			return true // can't tell: keep it
		}
		return fresh[attachmentKey(m.VolumeID, m.NodeID)]
	}
	n, err := k.deleteOrphans(ctx, orphanAge, attached)
	k.metrics.orphans.Add(float64(n))
	return n, err
}

// freshAttachments are attachmentsOf what the API holds now.
func (k *Kube) freshAttachments(ctx context.Context) (map[string]bool, error) {
	kc := k.Client
	list, err := kc.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	vas := make([]*storagev1.VolumeAttachment, len(list.Items))
	for i := range list.Items {
		vas[i] = &list.Items[i]
	}
	return k.attachmentsOf(vas, func(name string) (*corev1.PersistentVolume, error) {
		return kc.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	})
}

// attachmentsOf are the (volume handle, node id) pairs of this driver's
// VolumeAttachments among vas: the only reference count of mounter pods.
// pvNamed finds a PV by name.
func (k *Kube) attachmentsOf(vas []*storagev1.VolumeAttachment, pvNamed func(string) (*corev1.PersistentVolume, error)) (map[string]bool, error) {
	out := map[string]bool{}
	for _, va := range vas {
		if va.Spec.Attacher != k.Driver {
			continue
		}
		handle := ""
		if va.Spec.Source.InlineVolumeSpec != nil && va.Spec.Source.InlineVolumeSpec.CSI != nil {
			handle = va.Spec.Source.InlineVolumeSpec.CSI.VolumeHandle
		} else if pvName := va.Spec.Source.PersistentVolumeName; pvName != nil {
			pv, err := pvNamed(*pvName)
			if apierrors.IsNotFound(err) {
				continue // its VolumeAttachment is on its way out too
			}
			if err != nil {
				// Can't tell: keep every pod of this node to be safe.
				return nil, err
			}
			if pv.Spec.CSI != nil {
				handle = pv.Spec.CSI.VolumeHandle
			}
		}
		out[attachmentKey(handle, nodeIDOf(va))] = true
	}
	return out, nil
}

// attachmentKey names a (volume handle, CSI node id) pair in attachmentsOf.
func attachmentKey(volumeID, nodeID string) string { return volumeID + "\x00" + nodeID }

// nodeIDOf is the CSI node id a VolumeAttachment was published to.
func nodeIDOf(va *storagev1.VolumeAttachment) string {
	if id := va.Annotations[vaNodeIDAnnotation]; id != "" {
		return id
	}
	return va.Spec.NodeName
}

// deleteOrphans deletes mounter pods older than minAge whose (volume,
// node) pair attached() no longer knows: left behind when a
// ControllerUnpublish never came (a deleted VolumeAttachment, a crash).
// The mounter's lock is held from attached() to the delete, so that a
// Launch that adopts the pod meanwhile is not undone; the delete names
// the pod's UID, so that a new pod of the same name is not taken for it.
func (k *Kube) deleteOrphans(ctx context.Context, minAge time.Duration, attached func(m spec.Mounter) bool) (int, error) {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, pod := range pods {
		m := spec.Mounter{VolumeID: pod.Annotations[spec.AnnotationVolume], NodeID: pod.Annotations[spec.AnnotationNode], ForPod: pod.Annotations[spec.AnnotationForPod]}
		if m.VolumeID == "" || pod.DeletionTimestamp != nil || time.Since(pod.CreationTimestamp.Time) < minAge {
			continue
		}
		deleted, err := k.deleteOrphan(ctx, pod, m, attached)
		if err != nil {
			errs = append(errs, err)
		}
		if deleted {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (k *Kube) deleteOrphan(ctx context.Context, pod *corev1.Pod, m spec.Mounter, attached func(spec.Mounter) bool) (bool, error) {
	defer k.lock(m)()
	if attached(m) {
		return false, nil
	}
	k.Logger.Info("deleting orphaned mounter pod", "pod", pod.Name, "volume", m.VolumeID, "node", m.NodeID)
	uid := pod.UID
	err := k.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil // gone, or another pod by now
	case err != nil:
		return false, fmt.Errorf("delete orphaned mounter pod %s: %w", pod.Name, err)
	}
	return true, nil
}
