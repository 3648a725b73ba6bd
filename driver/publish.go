package driver

import (
	"context"
	"errors"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objfuse/objfuse/mounter-pod/launcher"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// PublishContextMounterUID carries the mounter pod's UID from
// ControllerPublishVolume to the node, which finds the mounter's socket
// in that pod's directory.
const PublishContextMounterUID = "objfuse.csi.io/mounter-uid"

func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node id is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	v, err := volume.FromContext(req.GetVolumeId(), req.GetVolumeContext(), d.opts.S3Defaults)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", req.GetVolumeId(), err)
	}
	if err := d.checkExists(ctx, v.ID, req.GetSecrets(), req.GetVolumeId()); err != nil {
		return nil, err
	}
	ok, err := d.opts.Launcher.NodeExists(ctx, req.GetNodeId())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "look up node %q: %v", req.GetNodeId(), err)
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q does not exist", req.GetNodeId())
	}
	creds, err := d.credentials(req.GetSecrets(), publishSecret)
	if err != nil {
		return nil, err
	}
	m := spec.Mounter{
		VolumeID: req.GetVolumeId(), NodeID: req.GetNodeId(), Volume: v,
		ReadOnly: req.GetReadonly() || readOnlyMode(req.GetVolumeCapability()),
	}
	defer d.locks.lock("publish/" + m.Key())()
	uid, err := d.opts.Launcher.Launch(ctx, m, creds)
	switch {
	case errors.Is(err, launcher.ErrIncompatible):
		return nil, status.Errorf(codes.AlreadyExists, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case errors.Is(err, launcher.ErrFailed), errors.Is(err, spec.ErrUnfit):
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case errors.Is(err, launcher.ErrNotReady):
		return nil, status.Errorf(codes.DeadlineExceeded, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "volume %q on node %q: start mounter: %v", req.GetVolumeId(), req.GetNodeId(), err)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{PublishContextMounterUID: uid}}, nil
}

func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if req.GetNodeId() == "" {
		// Spec: unpublish from every node. Mounters are per node, and
		// Kubernetes always names the node; nothing sensible to do without one.
		return nil, status.Error(codes.InvalidArgument, "node id is required: objfuse unpublishes per node")
	}
	m := spec.Mounter{VolumeID: req.GetVolumeId(), NodeID: req.GetNodeId()}
	defer d.locks.lock("publish/" + m.Key())()
	if err := d.opts.Launcher.Stop(ctx, m); err != nil {
		return nil, status.Errorf(codes.Unavailable, "volume %q on node %q: stop mounter: %v", req.GetVolumeId(), req.GetNodeId(), err)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// orphanAge is how old a mounter pod must be before it may be collected:
// older than any ControllerPublish that could still be creating it.
const orphanAge = 5 * time.Minute

// collectOrphans deletes mounter pods no VolumeAttachment accounts for;
// the controller runs it every minute. It reads the cluster cache, and
// asks the API only when the cache says a pod is an orphan: a get of
// every attachment's PV each minute would use up the client's rate
// limit, which CSI calls share. That check and the delete hold the
// pair's publish lock, so that a ControllerPublishVolume adopting the
// pod meanwhile (its attachment too new for the cache) is seen, not
// undone.
func (d *Driver) collectOrphans(ctx context.Context, k *launcher.Kube) {
	cachedVAs, err := d.cache.vas.List(labels.Everything())
	if err != nil {
		d.log.Warn("orphan collection: list cached attachments", "err", err)
		return
	}
	cached, err := d.attachmentsOf(cachedVAs, d.cache.pvs.Get)
	if err != nil {
		d.log.Warn("orphan collection: cached attachments", "err", err)
		return
	}
	attached := func(m spec.Mounter) bool {
		if cached[attachmentKey(m.VolumeID, m.NodeID)] {
			return true
		}
		fresh, err := d.freshAttachments(ctx)
		if err != nil {
			d.log.Warn("orphan collection: list attachments", "err", err)
			return true // can't tell: keep it
		}
		return fresh[attachmentKey(m.VolumeID, m.NodeID)]
	}
	lock := func(m spec.Mounter) func() { return d.locks.lock("publish/" + m.Key()) }
	n, err := k.CollectOrphans(ctx, orphanAge, attached, lock)
	if err != nil {
		d.log.Warn("orphan collection", "err", err)
	}
	d.metrics.orphans.Add(float64(n))
}

// freshAttachments are attachmentsOf what the API holds now.
func (d *Driver) freshAttachments(ctx context.Context) (map[string]bool, error) {
	kc := d.opts.KubeClient
	list, err := kc.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	vas := make([]*storagev1.VolumeAttachment, len(list.Items))
	for i := range list.Items {
		vas[i] = &list.Items[i]
	}
	return d.attachmentsOf(vas, func(name string) (*corev1.PersistentVolume, error) {
		return kc.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	})
}

// attachmentsOf are the (volume handle, node id) pairs of this driver's
// VolumeAttachments among vas: the only reference count of mounter pods.
// pvNamed finds a PV by name.
func (d *Driver) attachmentsOf(vas []*storagev1.VolumeAttachment, pvNamed func(string) (*corev1.PersistentVolume, error)) (map[string]bool, error) {
	out := map[string]bool{}
	for _, va := range vas {
		if va.Spec.Attacher != d.opts.Name {
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
