package driver

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// nodeServer serves the CSI Node service: it mounts /dev/fuse at a
// volume's staging path and hands the handle to the volume's mounter
// (node_stage.go), binds the mount into pods (node_publish.go), and
// repairs mounts whose mounter died (node_survival.go, node_reconcile.go).
type nodeServer struct {
	csi.UnimplementedNodeServer
	nodeID     string
	kubeletDir string // where mounter sockets live, in pod directories
	// finder finds a mounter pod that replaced a volume's; nil outside a
	// cluster.
	finder  *lifecycle.Finder
	mounts  mounts.Mounter
	events  EventSink
	state   *nodeState
	locks   keyLocks           // by volume id
	repairs prometheus.Counter // mounts rebuilt
	// keeper keeps the volumes' FUSE connections for a successor mounter
	// to take over; nil with takeover off.
	keeper            *connKeeper
	takeovers         prometheus.Counter
	takeoverFallbacks prometheus.Counter
	// upgrades upgrades running mounters to the driver's image; nil
	// when the node knows no image or no API.
	upgrades *mounterUpgrades
	// watches hear a mounter's end at once (node_survival.go).
	watches *mounterWatches
	// inlineAllow is the allow-list file of inline volumes.
	inlineAllow    string
	log            *slog.Logger
	probeTimeout   time.Duration // bounds a check of a FUSE mount
	mounterWait    time.Duration // bounds NodeStage's wait for the mounter's socket
	reconcileEvery time.Duration // how often the mounts are checked
}

var _ csi.NodeServer = (*nodeServer)(nil)

var nodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
	csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
}

func (n *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range nodeCaps {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (n *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.nodeID}, nil
}

func (n *nodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	path := req.GetVolumePath()
	if _, err := n.stagedAt(req.GetVolumeId(), path); err != nil {
		return nil, err
	}
	// When abnormal, the condition says how the mount survives its
	// mounter: whether the pods wait for a takeover or for a repair.
	mode := n.state.mode(req.GetVolumeId())
	if why := n.state.abnormalReason(req.GetVolumeId()); why != "" {
		return abnormal(withMode(why, mode)), nil
	}
	if _, ok, _ := mounts.Mounted(n.mounts, path); !ok {
		return abnormal(withMode(fmt.Sprintf("%s is not mounted", path), mode)), nil
	}
	fs, err := n.mounts.Statfs(path, n.probeTimeout)
	if err != nil {
		return abnormal(withMode(fmt.Sprintf("the mount does not answer: %v (the node plugin repairs it once its mounter is back)", err), mode)), nil
	}
	bs := int64(fs.Bsize)
	condition := "mounted and answering"
	if note := n.state.pendingNote(req.GetVolumeId()); note != "" {
		condition += "; " + note
	}
	if note := nearlyFull(fs.Blocks, fs.Bavail, bs); note != "" {
		condition += "; " + note
	}
	return &csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: int64(fs.Blocks) * bs, Available: int64(fs.Bavail) * bs, Used: int64(fs.Blocks-fs.Bfree) * bs},
			{Unit: csi.VolumeUsage_INODES, Total: int64(fs.Files), Available: int64(fs.Ffree), Used: int64(fs.Files - fs.Ffree)},
		},
		VolumeCondition: &csi.VolumeCondition{Abnormal: false, Message: condition},
	}, nil
}

// nearlyFull warns of a volume with a tenth or less of its size left,
// before its writers meet ENOSPC.
func nearlyFull(blocks, avail uint64, bs int64) string {
	if blocks == 0 || avail*10 > blocks {
		return ""
	}
	return fmt.Sprintf("%d%% of its %d MiB used: writes past its size fail with ENOSPC; expand the PVC (kubectl patch its spec.resources.requests.storage) or delete files", 100-avail*100/blocks, int64(blocks)*bs>>20)
}

// stagedAt is the volume staged on this node, which path is its staging
// path or one of its targets; NotFound otherwise.
func (n *nodeServer) stagedAt(volumeID, path string) (*stagedVolume, error) {
	st, err := n.state.load(volumeID)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", volumeID)
	}
	if _, known := st.Targets[path]; !known && path != st.Staging {
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at %s", volumeID, path)
	}
	return st, nil
}

func abnormal(why string) *csi.NodeGetVolumeStatsResponse {
	return &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{Abnormal: true, Message: why}}
}
