package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// mounterCheckEvery is how often Run checks that every
// attached volume still has its mounter pod.
const mounterCheckEvery = 10 * time.Second

// vaNodeIDAnnotation is where csi-attacher records the CSI node id of a
// VolumeAttachment's node.
const vaNodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"

// relaunchMissing starts a new mounter pod for each volume still attached
// to a node whose mounter pod is gone (deleted by hand, evicted under node
// pressure or by a drain while pods using it still run), and returns how
// many it started. Kubernetes calls ControllerPublishVolume once per
// attachment, so nothing else would, and every mount of the volume on
// that node would stay broken until its pods were recreated. The node
// plugin finds the new pod (Finder) and mounts again. Run runs it every
// MounterCheckEvery.
func (k *Kube) relaunchMissing(ctx context.Context) (int, error) {
	running, err := k.running(ctx)
	if err != nil {
		return 0, err
	}
	vas, err := k.cache.Load().vas.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("list volume attachments: %w", err)
	}
	n := 0
	for _, va := range vas {
		pvName := va.Spec.Source.PersistentVolumeName
		if va.Spec.Attacher != k.Driver || !served(va) || pvName == nil {
			continue
		}
		nodeID := nodeIDOf(va)
		pv, err := k.cache.Load().pvs.Get(*pvName)
		if err != nil || pv.Spec.CSI == nil {
			continue // gone meanwhile, or not ours
		}
		src := pv.Spec.CSI
		v, err := k.volumeOf(src)
		if err != nil {
			k.Logger.Error("relaunch mounter: the volume's attributes", "volume", src.VolumeHandle, "err", err)
			continue
		}
		m := spec.Mounter{VolumeID: src.VolumeHandle, NodeID: nodeID, Volume: v, ReadOnly: src.ReadOnly || readOnlyAccess(pv.Spec.AccessModes)}
		if running[runningKey(m.NamespaceOr(k.Namespace), m.PodName())] {
			continue
		}
		// The cache may lag behind a publish that just made the pod.
		if uid, err := k.finder().PodUID(ctx, m); err != nil || uid != "" {
			if err != nil {
				k.Logger.Error("relaunch mounter: a pod stands where the volume's mounter should; delete it", "volume", m.VolumeID, "node", nodeID, "err", err)
			}
			continue
		}
		if ok, err := k.NodeExists(ctx, nodeID); err != nil || !ok {
			continue // a node that is gone needs no mounter; its attachments go too
		}
		if err := k.relaunch(ctx, va.Name, m, src.ControllerPublishSecretRef); err != nil {
			k.Logger.Error("relaunch mounter", "volume", m.VolumeID, "node", nodeID, "err", err)
			continue
		}
		n++
	}
	k.metrics.relaunches.Add(float64(n))
	return n, nil
}

// relaunch starts m's mounter as ControllerPublishVolume did: the same
// volume, read-only flag and credentials (from the Secret ref names).
func (k *Kube) relaunch(ctx context.Context, vaName string, m spec.Mounter, ref *corev1.SecretReference) error {
	if err := OwnSecretNeeded(m, ref != nil); err != nil {
		return err
	}
	creds, err := k.publishCredentials(ctx, ref)
	if err != nil {
		return err
	}
	defer k.lock(m)()
	// ControllerUnpublishVolume may have run since the list: a mounter
	// started now would only be collected as an orphan later.
	va, err := k.Client.StorageV1().VolumeAttachments().Get(ctx, vaName, metav1.GetOptions{})
	if err != nil || !served(va) {
		return nil
	}
	k.Logger.Warn("mounter pod of an attached volume is gone; starting a new one", "volume", m.VolumeID, "node", m.NodeID)
	_, err = k.launch(ctx, m, creds)
	return err
}

// served says whether an attachment's volume is to be served on its
// node: attached, and not being deleted, or being deleted but refused
// (ControllerUnpublishVolume keeps a mounter a pod on the node uses, and
// csi-attacher records its error).
func served(va *storagev1.VolumeAttachment) bool {
	return va.Status.Attached && (va.DeletionTimestamp == nil || va.Status.DetachError != nil)
}

// readOnlyAccess says whether access modes make csi-attacher publish the
// volume read-only (a reader-only access mode).
func readOnlyAccess(modes []corev1.PersistentVolumeAccessMode) bool {
	return len(modes) == 1 && modes[0] == corev1.ReadOnlyMany
}
