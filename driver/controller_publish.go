package driver

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// PublishContextMounterUID carries the mounter pod's UID from
// ControllerPublishVolume to the node, which finds the mounter's socket
// in that pod's directory.
const PublishContextMounterUID = "objfuse.csi.io/mounter-uid"

func (c *controllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node id is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	v, err := volume.FromContext(req.GetVolumeId(), req.GetVolumeContext(), c.s3.defaults)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", req.GetVolumeId(), err)
	}
	m := spec.Mounter{
		VolumeID: req.GetVolumeId(), NodeID: req.GetNodeId(), Volume: v,
		ReadOnly: req.GetReadonly() || readOnlyMode(req.GetVolumeCapability()),
	}
	if err := lifecycle.OwnSecretNeeded(m, len(req.GetSecrets()) > 0); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	if err := c.checkExists(ctx, v.ID, req.GetSecrets(), req.GetVolumeId()); err != nil {
		return nil, err
	}
	ok, err := c.launcher.NodeExists(ctx, req.GetNodeId())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "look up node %q: %v", req.GetNodeId(), err)
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q does not exist", req.GetNodeId())
	}
	creds, err := c.s3.credentials(req.GetSecrets(), lifecycle.PublishSecret)
	if err != nil {
		return nil, err
	}
	// One pair's publish and unpublish run one at a time, whatever the
	// launcher (lifecycle.Kube also keeps its passes out of them).
	defer c.locks.lock("publish/" + m.Key())()
	uid, err := c.launcher.Launch(ctx, m, creds)
	switch {
	case errors.Is(err, lifecycle.ErrIncompatible):
		return nil, status.Errorf(codes.AlreadyExists, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case errors.Is(err, lifecycle.ErrFailed), errors.Is(err, spec.ErrUnfit), errors.Is(err, lifecycle.ErrNamespaceNotAllowed):
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case errors.Is(err, lifecycle.ErrRefused):
		return nil, status.Errorf(codes.ResourceExhausted, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case errors.Is(err, lifecycle.ErrNotReady):
		return nil, status.Errorf(codes.DeadlineExceeded, "volume %q on node %q: %v", req.GetVolumeId(), req.GetNodeId(), err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "volume %q on node %q: start mounter: %v", req.GetVolumeId(), req.GetNodeId(), err)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{PublishContextMounterUID: uid}}, nil
}

func (c *controllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if req.GetNodeId() == "" {
		// Spec: unpublish from every node. Mounters are per node, and
		// Kubernetes always names the node; nothing sensible to do without one.
		return nil, status.Error(codes.InvalidArgument, "node id is required: objfuse unpublishes per node")
	}
	m := spec.Mounter{VolumeID: req.GetVolumeId(), NodeID: req.GetNodeId()}
	defer c.locks.lock("publish/" + m.Key())()
	if err := c.launcher.Stop(ctx, m); err != nil {
		return nil, status.Errorf(codes.Unavailable, "volume %q on node %q: stop mounter: %v", req.GetVolumeId(), req.GetNodeId(), err)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
