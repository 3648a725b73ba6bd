package driver

import (
	"context"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

func (n *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	case req.GetStagingTargetPath() == "" && !isInline(req.GetVolumeContext()):
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if isInline(req.GetVolumeContext()) {
		return n.publishInline(ctx, req)
	}
	defer n.locks.lock(req.GetVolumeId())()
	st, err := n.state.load(req.GetVolumeId())
	if err != nil || st.Staging != req.GetStagingTargetPath() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %s", req.GetVolumeId(), req.GetStagingTargetPath())
	}
	if err := n.publish(st, req); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publish binds the staged volume st at the request's target. The caller
// holds the volume's lock.
func (n *nodeServer) publish(st *stagedVolume, req *csi.NodePublishVolumeRequest) error {
	// Never bind a plain directory: a pod would write to the node's disk.
	if m, ok, _ := mounts.Mounted(n.mounts, st.Staging); !ok || m.FsType != mounts.FSType {
		return status.Errorf(codes.Unavailable, "volume %q: staging path %s is not mounted (its mounter may be restarting; the node repairs it)", req.GetVolumeId(), st.Staging)
	}
	target := req.GetTargetPath()
	ro := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	if m, ok, _ := mounts.Mounted(n.mounts, target); ok {
		if m.FsType == mounts.FSType && st.Targets[target] == ro {
			// Published already; a node plugin older than the pods it
			// keeps learns whose it is now.
			if _, known := st.Pods[target]; !known && keepPod(st, target, req.GetVolumeContext()) {
				if err := n.state.save(st); err != nil {
					n.log.Warn("remember the pod of a target", "volume", st.VolumeID, "target", target, "err", err)
				}
			}
			return nil
		}
		return status.Errorf(codes.AlreadyExists, "target %s is already mounted with other options", target)
	}
	if req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		for t := range st.Targets {
			if t != target {
				return status.Errorf(codes.FailedPrecondition, "volume %q is SINGLE_NODE_SINGLE_WRITER and already published at %s", req.GetVolumeId(), t)
			}
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Errorf(codes.Internal, "target path: %v", err)
	}
	if err := n.mounts.Bind(st.Staging, target, ro); err != nil {
		return status.Errorf(codes.Internal, "publish %s: %v", req.GetVolumeId(), err)
	}
	st.Targets[target] = ro
	keepPod(st, target, req.GetVolumeContext())
	if err := n.state.save(st); err != nil {
		n.mounts.UnmountAll(target)
		return status.Errorf(codes.Internal, "publish %s: %v", req.GetVolumeId(), err)
	}
	n.log.Info("published", "volume", req.GetVolumeId(), "target", target, "readOnly", ro)
	return nil
}

func (n *nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	defer n.locks.lock(req.GetVolumeId())()
	if err := n.mounts.UnmountAll(req.GetTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish %s: %v", req.GetVolumeId(), err)
	}
	removeEmptyDir(req.GetTargetPath())
	if st, err := n.state.load(req.GetVolumeId()); err == nil {
		delete(st.Targets, req.GetTargetPath())
		delete(st.Pods, req.GetTargetPath())
		if err := n.state.save(st); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublish %s: %v", req.GetVolumeId(), err)
		}
		// An inline volume is staged for its one pod, and goes with it.
		if st.Inline && len(st.Targets) == 0 {
			if err := n.unstage(ctx, st.VolumeID, st.Staging); err != nil {
				return nil, err
			}
		}
	}
	n.log.Info("unpublished", "volume", req.GetVolumeId(), "target", req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// removeEmptyDir removes a mount's directory if it is empty; one with
// something in it is not ours to delete, and is left.
func removeEmptyDir(path string) { _ = os.Remove(path) }
