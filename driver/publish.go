package driver

import (
	"context"
	"errors"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/driver/volume"
	"github.com/objfuse/objfuse/mounter-pod/launcher"
	"github.com/objfuse/objfuse/mounter-pod/spec"
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
// the controller runs it every minute.
func (d *Driver) collectOrphans(ctx context.Context, k *launcher.Kube) {
	attached, err := d.attachments(ctx)
	if err != nil {
		d.log.Warn("orphan collection: list attachments", "err", err)
		return
	}
	n, err := k.CollectOrphans(ctx, orphanAge, func(vol, node string) bool { return attached[vol+"\x00"+node] })
	if err != nil {
		d.log.Warn("orphan collection", "err", err)
	}
	d.metrics.orphans.Add(float64(n))
}

// attachments are the (volume handle, node) pairs of this driver's
// VolumeAttachments: the only reference count of mounter pods.
func (d *Driver) attachments(ctx context.Context) (map[string]bool, error) {
	kc := d.opts.KubeClient
	vas, err := kc.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, va := range vas.Items {
		if va.Spec.Attacher != d.opts.Name {
			continue
		}
		handle := ""
		if va.Spec.Source.InlineVolumeSpec != nil && va.Spec.Source.InlineVolumeSpec.CSI != nil {
			handle = va.Spec.Source.InlineVolumeSpec.CSI.VolumeHandle
		} else if pvName := va.Spec.Source.PersistentVolumeName; pvName != nil {
			pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, *pvName, metav1.GetOptions{})
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
		out[handle+"\x00"+va.Spec.NodeName] = true
	}
	return out, nil
}
