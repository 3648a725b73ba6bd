package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

var nodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
	csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range nodeCaps {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.opts.NodeID}, nil
}

func mountGroup(c *csi.VolumeCapability) (*uint32, error) {
	g := c.GetMount().GetVolumeMountGroup()
	if g == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(g, 10, 32)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume mount group %q: want a numeric group id (the pod's fsGroup)", g)
	}
	u := uint32(n)
	return &u, nil
}

func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	group, err := mountGroup(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	v, err := volume.FromContext(req.GetVolumeId(), req.GetVolumeContext(), volume.Defaults{Endpoint: "http://unused"})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: %v", req.GetVolumeId(), err)
	}
	uid := req.GetPublishContext()[PublishContextMounterUID]
	if uid == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q has no mounter on this node: publish context lacks %s (did ControllerPublishVolume run?)", req.GetVolumeId(), PublishContextMounterUID)
	}
	if _, err := spec.SocketOnNode(d.opts.KubeletDir, uid); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "publish context: %v", err)
	}
	defer d.locks.lock(req.GetVolumeId())()

	st := &stagedVolume{
		VolumeID: req.GetVolumeId(), Source: "objfuse:" + v.Source(), MounterUID: uid,
		ReadOnly: readOnlyMode(req.GetVolumeCapability()), MountGroup: group,
		Staging: req.GetStagingTargetPath(), Targets: map[string]bool{},
	}
	if old, err := d.loadState(st.VolumeID); err == nil {
		if old.Staging != st.Staging {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q is already staged at %s", st.VolumeID, old.Staging)
		}
		st.Targets, st.Pods = old.Targets, old.Pods
		if old.MounterUID == st.MounterUID {
			st.ToldLostUploads, st.ToldConflicts = old.ToldLostUploads, old.ToldConflicts
		}
		if d.healthy(st.Staging) {
			if old.MounterUID != st.MounterUID || old.ReadOnly != st.ReadOnly {
				// A replaced mounter pod: repairs must find the new one.
				if err := d.saveState(st); err != nil {
					return nil, status.Errorf(codes.Internal, "stage %s: %v", st.VolumeID, err)
				}
			}
			return &csi.NodeStageVolumeResponse{}, nil
		}
	}
	if err := os.MkdirAll(d.volumeDir(st.VolumeID), 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "stage %s: %v", st.VolumeID, err)
	}
	if err := d.saveState(st); err != nil {
		return nil, status.Errorf(codes.Internal, "stage %s: %v", st.VolumeID, err)
	}
	if err := d.mountVolume(ctx, st); err != nil {
		return nil, err
	}
	d.log.Info("staged", "volume", st.VolumeID, "staging", st.Staging, "source", st.Source)
	return &csi.NodeStageVolumeResponse{}, nil
}

// healthy says whether path is an objfuse mount that answers.
func (d *Driver) healthy(path string) bool {
	m, ok, err := mounts.Mounted(d.mounts, path)
	if err != nil || !ok || m.FsType != mounts.FSType {
		return false
	}
	_, err = d.mounts.Statfs(path, d.opts.ProbeTimeout)
	return err == nil
}

// mountVolume (re)builds st's mounts: a fresh FUSE mount at the staging
// path served by the mounter, bound at every target.
func (d *Driver) mountVolume(ctx context.Context, st *stagedVolume) error {
	if err := d.mounts.UnmountAll(st.Staging); err != nil {
		return status.Errorf(codes.Internal, "volume %s: %v", st.VolumeID, err)
	}
	// The FUSE filesystem is mounted at the staging path itself: kubelet
	// refuses NodeUnstage while the filesystem is mounted anywhere else
	// outside its own directories (GetDeviceMountRefs).
	if err := d.serveFUSE(ctx, st, st.Staging); err != nil {
		return err
	}
	// Targets get the new mount on top of the dead one, not in its
	// place: a container that mounted the target with HostToContainer
	// propagation receives mounts made below its mountpoint, so it sees
	// the repaired volume at once. (NodeUnpublish removes the stack.)
	for t, ro := range st.Targets {
		if err := d.mounts.Bind(st.Staging, t, ro); err != nil {
			return status.Errorf(codes.Internal, "volume %s: %v", st.VolumeID, err)
		}
	}
	return nil
}

// serveFUSE mounts /dev/fuse at mnt and hands the handle to the mounter,
// waiting (bounded) for it to come up and to answer "serving".
func (d *Driver) serveFUSE(ctx context.Context, st *stagedVolume, mnt string) error {
	socket, _ := spec.SocketOnNode(d.opts.KubeletDir, st.MounterUID)
	wctx, cancel := context.WithTimeout(ctx, d.opts.MounterWait)
	defer cancel()
	var rep handoff.Reply
	var lastErr error
	up := waitFor(wctx, 200*time.Millisecond, func() bool {
		cctx, cancel := context.WithTimeout(wctx, 3*time.Second)
		defer cancel()
		rep, lastErr = handoff.Call(cctx, socket, handoff.Request{Op: handoff.OpStatus}, -1)
		return lastErr == nil
	})
	if !up {
		return status.Errorf(codes.Unavailable, "volume %s: the mounter does not answer at %s: %v", st.VolumeID, socket, lastErr)
	}
	if want := strings.TrimPrefix(st.Source, "objfuse:"); strings.TrimSuffix(strings.TrimPrefix(rep.Source, "objfuse:"), "/") != want {
		return status.Errorf(codes.FailedPrecondition, "volume %s: the mounter at %s serves %q, not %q", st.VolumeID, socket, rep.Source, want)
	}
	if rep.Serving {
		return status.Errorf(codes.FailedPrecondition, "volume %s: the mounter at %s already serves another FUSE connection", st.VolumeID, socket)
	}
	if err := os.MkdirAll(mnt, 0o750); err != nil {
		return status.Errorf(codes.Internal, "mountpoint: %v", err)
	}
	fd, err := d.mounts.MountFUSE(mnt, st.Source, st.ReadOnly)
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: %v", st.VolumeID, err)
	}
	_, err = handoff.Call(wctx, socket, handoff.Request{Op: handoff.OpServe, MountGroup: st.MountGroup}, fd)
	closeFD(fd)
	if err != nil {
		d.mounts.UnmountAll(mnt)
		return status.Errorf(codes.Unavailable, "volume %s: hand the FUSE handle to the mounter: %v", st.VolumeID, err)
	}
	// The mounter answered INIT before "serving", so the kernel's
	// readahead can be raised now; the mount works without it, slower.
	if err := d.mounts.TuneReadahead(mnt, mounts.ReadaheadKiB); err != nil {
		d.log.Warn("kernel readahead left at its default", "volume", st.VolumeID, "err", err)
	}
	return nil
}

func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	defer d.locks.lock(req.GetVolumeId())()
	st, err := d.loadState(req.GetVolumeId())
	if err == nil && st.MounterUID != "" {
		// Uploads first: the mounter releases the mount only once nothing
		// is pending. Anything but "no mounter there" keeps the mount and
		// fails, and kubelet retries; the mounter goes on uploading.
		socket, _ := spec.SocketOnNode(d.opts.KubeletDir, st.MounterUID)
		_, err := handoff.Call(ctx, socket, handoff.Request{Op: handoff.OpExit}, -1)
		if err != nil && !mounterGone(err) {
			return nil, status.Errorf(codes.Unavailable, "unstage %s: the mounter has not uploaded everything yet: %v", req.GetVolumeId(), err)
		}
	}
	if err := d.mounts.UnmountAll(req.GetStagingTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage %s: %v", req.GetVolumeId(), err)
	}
	if err := os.RemoveAll(d.volumeDir(req.GetVolumeId())); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage %s: %v", req.GetVolumeId(), err)
	}
	removeEmptyDir(req.GetStagingTargetPath())
	d.setAbnormal(req.GetVolumeId(), "")
	d.setPending(req.GetVolumeId(), "")
	d.log.Info("unstaged", "volume", req.GetVolumeId())
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	defer d.locks.lock(req.GetVolumeId())()
	st, err := d.loadState(req.GetVolumeId())
	if err != nil || st.Staging != req.GetStagingTargetPath() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %s", req.GetVolumeId(), req.GetStagingTargetPath())
	}
	// Never bind a plain directory: a pod would write to the node's disk.
	if m, ok, _ := mounts.Mounted(d.mounts, st.Staging); !ok || m.FsType != mounts.FSType {
		return nil, status.Errorf(codes.Unavailable, "volume %q: staging path %s is not mounted (its mounter may be restarting; the node repairs it)", req.GetVolumeId(), st.Staging)
	}
	target := req.GetTargetPath()
	ro := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	if m, ok, _ := mounts.Mounted(d.mounts, target); ok {
		if m.FsType == mounts.FSType && st.Targets[target] == ro {
			// Published already; a node plugin older than the pods it
			// keeps learns whose it is now.
			if _, known := st.Pods[target]; !known && keepPod(st, target, req.GetVolumeContext()) {
				if err := d.saveState(st); err != nil {
					d.log.Warn("remember the pod of a target", "volume", st.VolumeID, "target", target, "err", err)
				}
			}
			return &csi.NodePublishVolumeResponse{}, nil
		}
		return nil, status.Errorf(codes.AlreadyExists, "target %s is already mounted with other options", target)
	}
	if req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		for t := range st.Targets {
			if t != target {
				return nil, status.Errorf(codes.FailedPrecondition, "volume %q is SINGLE_NODE_SINGLE_WRITER and already published at %s", req.GetVolumeId(), t)
			}
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "target path: %v", err)
	}
	if err := d.mounts.Bind(st.Staging, target, ro); err != nil {
		return nil, status.Errorf(codes.Internal, "publish %s: %v", req.GetVolumeId(), err)
	}
	st.Targets[target] = ro
	keepPod(st, target, req.GetVolumeContext())
	if err := d.saveState(st); err != nil {
		d.mounts.UnmountAll(target)
		return nil, status.Errorf(codes.Internal, "publish %s: %v", req.GetVolumeId(), err)
	}
	d.log.Info("published", "volume", req.GetVolumeId(), "target", target, "readOnly", ro)
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	defer d.locks.lock(req.GetVolumeId())()
	if err := d.mounts.UnmountAll(req.GetTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish %s: %v", req.GetVolumeId(), err)
	}
	removeEmptyDir(req.GetTargetPath())
	if st, err := d.loadState(req.GetVolumeId()); err == nil {
		delete(st.Targets, req.GetTargetPath())
		delete(st.Pods, req.GetTargetPath())
		if err := d.saveState(st); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublish %s: %v", req.GetVolumeId(), err)
		}
	}
	d.log.Info("unpublished", "volume", req.GetVolumeId(), "target", req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// removeEmptyDir removes a mount's directory if it is empty; one with
// something in it is not ours to delete, and is left.
func removeEmptyDir(path string) { _ = os.Remove(path) }

func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	st, err := d.loadState(req.GetVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", req.GetVolumeId())
	}
	path := req.GetVolumePath()
	if _, known := st.Targets[path]; !known && path != st.Staging {
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at %s", req.GetVolumeId(), path)
	}
	if why := d.abnormalReason(req.GetVolumeId()); why != "" {
		return abnormal(why), nil
	}
	if _, ok, _ := mounts.Mounted(d.mounts, path); !ok {
		return abnormal(fmt.Sprintf("%s is not mounted", path)), nil
	}
	fs, err := d.mounts.Statfs(path, d.opts.ProbeTimeout)
	if err != nil {
		return abnormal(fmt.Sprintf("the mount does not answer: %v (the node plugin repairs it once its mounter is back)", err)), nil
	}
	bs := int64(fs.Bsize)
	condition := "mounted and answering"
	if note := d.pendingNote(req.GetVolumeId()); note != "" {
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

func abnormal(why string) *csi.NodeGetVolumeStatsResponse {
	return &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{Abnormal: true, Message: why}}
}

// mounterGone says whether a call failed because no mounter listens:
// nothing pending can be lost by going on.
func mounterGone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}
