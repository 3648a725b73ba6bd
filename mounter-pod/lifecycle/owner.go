package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// A mounter pod is controlled by the VolumeAttachment it serves:
//   - `kubectl drain --ignore-daemonsets --delete-emptydir-data` evicts it
//     like any controlled pod, where a pod without a controller makes the
//     drain refuse the node unless forced (Mountpoint for S3's mounter pods
//     do, awslabs/mountpoint-s3-csi-driver#787). Evicted, the mounter
//     keeps serving through its grace period while pods still use it, and
//     leaves as soon as NodeUnstage releases it;
//   - should the attachment go without a ControllerUnpublish (deleted by
//     hand, its finalizer removed), the garbage collector deletes the pod
//     with it, not only the next orphan pass.
// Outside Kubernetes' attach flow (csi-sanity, a CSI client of its own)
// there is no attachment, and the pod has no owner. An inline volume has
// no attachment either: its mounter is controlled by its node (nodeOwner).

// attachmentName is the name Kubernetes gives the VolumeAttachment of a
// CSI volume on a node (k8s.io/kubernetes pkg/volume/csi, getAttachmentName).
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// attachmentOwner returns the controller reference to the VolumeAttachment
// of m on node, or none when there is no such live attachment of this
// driver, or it cannot be read now (the pod then has no owner: a drain
// asks for --force, no worse than that).
func (k *Kube) attachmentOwner(ctx context.Context, m spec.Mounter, node string) []metav1.OwnerReference {
	va, err := k.Client.StorageV1().VolumeAttachments().Get(ctx, attachmentName(m.VolumeID, k.Driver, node), metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			k.Logger.Warn("mounter pod without an owner: its volume attachment cannot be read", "volume", m.VolumeID, "node", node, "err", err)
		}
		return nil
	}
	if va.Spec.Attacher != k.Driver || va.Spec.NodeName != node || va.DeletionTimestamp != nil {
		return nil
	}
	return []metav1.OwnerReference{{
		APIVersion: storagev1.SchemeGroupVersion.String(), Kind: "VolumeAttachment",
		Name: va.Name, UID: va.UID, Controller: ptr.To(true),
		// No BlockOwnerDeletion: it would need volumeattachments/finalizers
		// rights where OwnerReferencesPermissionEnforcement runs.
	}}
}

// adoptOwner makes a live pod that Launch adopts controlled by the
// attachment it now serves (an attachment deleted and made again has a
// new UID; a pod of an earlier objfuse has no owner).
func (k *Kube) adoptOwner(ctx context.Context, pod *corev1.Pod, owner []metav1.OwnerReference) (*corev1.Pod, error) {
	if owner == nil || slices.ContainsFunc(pod.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner[0].UID }) {
		return pod, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": owner, "uid": pod.UID}})
	if err != nil {
		return nil, err
	}
	p, err := k.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("own mounter pod %s by its volume attachment: %w", pod.Name, err)
	}
	return p, nil
}

// nodeOwner is the controller reference of an inline volume's mounter
// pod: its node. The pod it serves is in another namespace and cannot
// own it, and a drain refuses a pod no controller owns; owned by the
// node, it is evicted with the pods of the node and goes with the node.
func nodeOwner(node *corev1.Node) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true)}}
}
