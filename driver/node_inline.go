package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume/inline"
)

// isInline says whether a NodePublishVolume is of a pod's inline volume
// (CSI's ephemeral lifecycle): kubelet says so in the volume context.
func isInline(vc map[string]string) bool { return vc[inline.CtxEphemeral] == "true" }

// publishInline publishes a pod's inline volume. No NodeStage comes for
// it, and no ControllerPublish: the controller starts its mounter when it
// sees the pod scheduled here (lifecycle/inline.go), and the node stages
// the volume itself, at a path of its own, then binds it at the target.
// The node checks the allow-list too, so that a pod of a namespace the
// admin did not list is told why in its Events (kubelet's FailedMount).
func (n *nodeServer) publishInline(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	vc := req.GetVolumeContext()
	v, err := inline.Volume(req.GetVolumeId(), vc)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "inline volume: %v", err)
	}
	rules, err := inline.Load(n.inlineAllow)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	if err := rules.Allows(vc[ctxPodNamespace], v.ID); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "%v", err)
	}
	if len(req.GetSecrets()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "an inline objfuse volume names a Secret of its namespace with its S3 keys: nodePublishSecretRef: {name: ...} (keys accessKeyID and secretAccessKey)")
	}
	group, err := mountGroup(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if n.finder == nil {
		return nil, status.Error(codes.FailedPrecondition, "inline volumes need the node plugin to reach the Kubernetes API (to find the volume's mounter pod)")
	}
	defer n.locks.lock(req.GetVolumeId())()
	st, err := n.state.load(req.GetVolumeId())
	staged := err != nil
	if staged {
		uid, err := n.awaitMounter(ctx, spec.Mounter{VolumeID: req.GetVolumeId(), NodeID: n.nodeID}, "this inline volume's")
		if err != nil {
			return nil, err
		}
		st = &stagedVolume{
			VolumeID: req.GetVolumeId(), Source: "objfuse:" + v.Source(), MounterUID: uid,
			ReadOnly: req.GetReadonly(), MountGroup: group,
			Staging: n.state.inlineStaging(req.GetVolumeId()), Targets: map[string]bool{}, Inline: true,
		}
		if err := n.stage(ctx, st); err != nil {
			n.dropInline(ctx, st)
			return nil, err
		}
	}
	if err := n.publish(st, req); err != nil {
		if staged && len(st.Targets) == 0 {
			n.dropInline(ctx, st)
		}
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// dropInline unstages an inline volume staged for a publish that failed:
// should kubelet not retry (its pod deleted meanwhile), no unpublish
// would come for it.
func (n *nodeServer) dropInline(ctx context.Context, st *stagedVolume) {
	if err := n.unstage(ctx, st.VolumeID, st.Staging); err != nil {
		n.log.Warn("unstage an inline volume whose publish failed", "volume", st.VolumeID, "err", err)
	}
}
