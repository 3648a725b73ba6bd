package driver

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

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

func (n *nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
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
		// attachRequired: false: kubelet stages without waiting for the
		// attachment, which the controller makes when it sees the pod
		// scheduled here (lifecycle/attach.go); its mounter is found by
		// name once it runs.
		if n.finder == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q has no mounter on this node: publish context lacks %s (did ControllerPublishVolume run?) and the node plugin cannot reach the Kubernetes API to find one", req.GetVolumeId(), PublishContextMounterUID)
		}
		uid, err = n.awaitMounter(ctx, spec.Mounter{VolumeID: req.GetVolumeId(), NodeID: n.nodeID, Volume: v}, "this volume's")
		if err != nil {
			return nil, err
		}
	}
	if _, err := spec.SocketOnNode(n.kubeletDir, uid); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "publish context: %v", err)
	}
	defer n.locks.lock(req.GetVolumeId())()
	st := &stagedVolume{
		VolumeID: req.GetVolumeId(), Source: "objfuse:" + v.Source(), MounterUID: uid,
		MounterNamespace: v.Mounter.Namespace,
		ReadOnly:         readOnlyMode(req.GetVolumeCapability()), MountGroup: group,
		Staging: req.GetStagingTargetPath(), Targets: map[string]bool{},
	}
	if err := n.stage(ctx, st); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// stage mounts the volume st describes at its staging path, served by its
// mounter, and remembers it; a volume staged there already is kept, and
// learns of a replaced mounter. The caller holds the volume's lock.
func (n *nodeServer) stage(ctx context.Context, st *stagedVolume) error {
	if old, err := n.state.load(st.VolumeID); err == nil {
		if old.Staging != st.Staging {
			return status.Errorf(codes.FailedPrecondition, "volume %q is already staged at %s", st.VolumeID, old.Staging)
		}
		st.Targets, st.Pods = old.Targets, old.Pods
		if old.MounterUID == st.MounterUID {
			st.ToldLostUploads, st.ToldConflicts = old.ToldLostUploads, old.ToldConflicts
		}
		if n.healthy(st.Staging) || n.awaitingTakeover(st) {
			if old.MounterUID != st.MounterUID || old.ReadOnly != st.ReadOnly {
				// A replaced mounter pod: repairs must find the new one.
				if err := n.state.save(st); err != nil {
					return status.Errorf(codes.Internal, "stage %s: %v", st.VolumeID, err)
				}
			}
			return nil
		}
	}
	if err := os.MkdirAll(n.state.volumeDir(st.VolumeID), 0o700); err != nil {
		return status.Errorf(codes.Internal, "stage %s: %v", st.VolumeID, err)
	}
	if err := n.state.save(st); err != nil {
		return status.Errorf(codes.Internal, "stage %s: %v", st.VolumeID, err)
	}
	if err := n.mountVolume(ctx, st); err != nil {
		return err
	}
	n.log.Info("staged", "volume", st.VolumeID, "staging", st.Staging, "source", st.Source)
	return nil
}

// healthy says whether path is an objfuse mount that answers.
func (n *nodeServer) healthy(path string) bool {
	m, ok, err := mounts.Mounted(n.mounts, path)
	if err != nil || !ok || m.FsType != mounts.FSType {
		return false
	}
	_, err = n.mounts.Statfs(path, n.probeTimeout)
	return err == nil
}

// awaitingTakeover says whether st's mount is at its staging path with
// its connection kept for a successor mounter: a mount that hangs while
// its mounter restarts is staged all the same, and mounting it again
// would fail the requests a takeover is about to resume.
func (n *nodeServer) awaitingTakeover(st *stagedVolume) bool {
	conn, kept := n.keeper.connection(st.VolumeID)
	if !kept {
		return false
	}
	m, ok, err := mounts.Mounted(n.mounts, st.Staging)
	return err == nil && ok && m.FsType == mounts.FSType && (conn == mounts.UnknownConnection || conn == m.Minor)
}

// mountVolume (re)builds st's mounts: a fresh FUSE mount at the staging
// path served by the mounter, bound at every target.
func (n *nodeServer) mountVolume(ctx context.Context, st *stagedVolume) error {
	if err := n.mounts.UnmountAll(st.Staging); err != nil {
		return status.Errorf(codes.Internal, "volume %s: %v", st.VolumeID, err)
	}
	n.keeper.drop(st.VolumeID) // the connection replaced, after its unmount
	// The FUSE filesystem is mounted at the staging path itself: kubelet
	// refuses NodeUnstage while the filesystem is mounted anywhere else
	// outside its own directories (GetDeviceMountRefs).
	if err := n.serveFUSE(ctx, st, st.Staging); err != nil {
		return err
	}
	// Targets get the new mount on top of the dead one, not in its
	// place: a container that mounted the target with HostToContainer
	// propagation receives mounts made below its mountpoint, so it sees
	// the repaired volume at once. (NodeUnpublish removes the stack.)
	for t, ro := range st.Targets {
		if err := n.mounts.Bind(st.Staging, t, ro); err != nil {
			return status.Errorf(codes.Internal, "volume %s: %v", st.VolumeID, err)
		}
	}
	return nil
}

// serveFUSE mounts /dev/fuse at mnt and hands the handle to the mounter,
// waiting (bounded) for it to come up and to answer "serving".
func (n *nodeServer) serveFUSE(ctx context.Context, st *stagedVolume, mnt string) error {
	socket, _ := spec.SocketOnNode(n.kubeletDir, st.MounterUID)
	wctx, cancel := context.WithTimeout(ctx, n.mounterWait)
	defer cancel()
	var rep handoff.Reply
	var lastErr error
	var failed string
	checkPodAt := time.Now().Add(time.Second)
	up := waitFor(wctx, 200*time.Millisecond, func() bool {
		cctx, cancel := context.WithTimeout(wctx, 3*time.Second)
		defer cancel()
		rep, lastErr = handoff.Call(cctx, socket, handoff.Request{Op: handoff.OpStatus}, -1)
		if lastErr == nil {
			return true
		}
		// Attached once its container runs, a mounter may still exit
		// (keys S3 refuses): say why at once, not after the wait.
		if time.Now().After(checkPodAt) {
			checkPodAt = time.Now().Add(time.Second)
			failed = n.mounterFailure(wctx, st)
		}
		return failed != ""
	})
	switch {
	case failed != "":
		// Unavailable, not FailedPrecondition: kubelet takes the latter
		// as final and would never unstage what this stage saved, and
		// the pod may yet come up (a restart kubelet reports late).
		return status.Errorf(codes.Unavailable, "volume %s: %s", st.VolumeID, failed)
	case !up:
		return status.Errorf(codes.Unavailable, "volume %s: the mounter does not answer at %s: %v%s", st.VolumeID, socket, lastErr, n.mounterWaiting(ctx, st))
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
	fd, err := n.mounts.MountFUSE(mnt, st.Source, st.ReadOnly)
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: %v", st.VolumeID, err)
	}
	_, err = handoff.Call(wctx, socket, handoff.Request{Op: handoff.OpServe, MountGroup: st.MountGroup, Kept: n.keeper != nil}, fd)
	if err != nil {
		closeFD(fd)
		n.mounts.UnmountAll(mnt)
		return status.Errorf(codes.Unavailable, "volume %s: hand the FUSE handle to the mounter: %v", st.VolumeID, err)
	}
	// The node's handle is kept, so that the connection outlives the
	// mounter (closed at once with takeover off).
	n.keeper.keep(st.VolumeID, fd)
	n.watchMounter(st.VolumeID, socket)
	// The mounter answered INIT before "serving", so the kernel's
	// readahead can be raised now; the mount works without it, slower.
	if err := n.mounts.TuneReadahead(mnt, mounts.ReadaheadKiB); err != nil {
		n.log.Warn("kernel readahead left at its default", "volume", st.VolumeID, "err", err)
	}
	if err := n.mounts.DisablePoll(mnt); err != nil {
		n.log.Warn("the kernel will ask the mounter to poll each file opened by a Go program", "volume", st.VolumeID, "err", err)
	}
	return nil
}

func (n *nodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	defer n.locks.lock(req.GetVolumeId())()
	if err := n.unstage(ctx, req.GetVolumeId(), req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unstage releases the volume's mounter once it has uploaded everything,
// unmounts the staging path and forgets the volume. The caller holds the
// volume's lock.
func (n *nodeServer) unstage(ctx context.Context, volumeID, staging string) error {
	st, err := n.state.load(volumeID)
	if err == nil && st.MounterUID != "" {
		// Uploads first: the mounter releases the mount only once nothing
		// is pending. Anything but "no mounter there" keeps the mount and
		// fails, and kubelet retries; the mounter goes on uploading.
		socket, _ := spec.SocketOnNode(n.kubeletDir, st.MounterUID)
		_, err := handoff.Call(ctx, socket, handoff.Request{Op: handoff.OpExit}, -1)
		if err != nil && !mounterGone(err) {
			return status.Errorf(codes.Unavailable, "unstage %s: the mounter has not uploaded everything yet: %v", volumeID, err)
		}
	}
	if err := n.mounts.UnmountAll(staging); err != nil {
		return status.Errorf(codes.Internal, "unstage %s: %v", volumeID, err)
	}
	// After the unmount: the connection ends with it, and a pod's
	// request still waiting on it fails rather than waits forever.
	n.keeper.drop(volumeID)
	if err := os.RemoveAll(n.state.volumeDir(volumeID)); err != nil {
		return status.Errorf(codes.Internal, "unstage %s: %v", volumeID, err)
	}
	removeEmptyDir(staging)
	n.state.setAbnormal(volumeID, "")
	n.state.setPending(volumeID, "")
	n.state.setMode(volumeID, "")
	n.log.Info("unstaged", "volume", volumeID)
	return nil
}

// mounterFailure says why st's mounter pod cannot serve (lifecycle's
// reasons), "" while it may yet or when the node cannot read pods.
func (n *nodeServer) mounterFailure(ctx context.Context, st *stagedVolume) string {
	if n.finder == nil {
		return ""
	}
	why, err := n.finder.Failure(ctx, st.mounter(n.nodeID), st.MounterUID)
	if err != nil {
		n.log.Debug("read the mounter pod", "volume", st.VolumeID, "err", err)
	}
	return why
}

// mounterWaiting says, for an error, why st's mounter pod does not run
// yet (its node lacks the memory it asks for, its image is missing):
// with attachRequired: false the stage finds the pod before it runs, and
// csi-attacher's error on the attachment comes only after
// ControllerPublishVolume's own wait.
func (n *nodeServer) mounterWaiting(ctx context.Context, st *stagedVolume) string {
	if n.finder == nil {
		return ""
	}
	why, err := n.finder.Waiting(ctx, st.mounter(n.nodeID), st.MounterUID)
	if err != nil || why == "" {
		return ""
	}
	return " (" + why + ")"
}

// awaitMounter waits (bounded) for the controller to start m's mounter
// on this node, and returns its pod's UID; whose says whose mounter it
// is in the error. It waits half of mounterWait: with the socket's wait
// after it (mounterWait), a stage still ends before kubelet's deadline
// for it (2 minutes; mounterWait is 1 by default). It asks again after
// 0.1 s, then less often (up to every second): many stages at once
// share the node plugin's API rate limit.
func (n *nodeServer) awaitMounter(ctx context.Context, m spec.Mounter, whose string) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, n.mounterWait/2)
	defer cancel()
	var lastErr error
	for delay := 100 * time.Millisecond; wctx.Err() == nil; delay = min(2*delay, time.Second) {
		uid, err := n.finder.PodUID(wctx, m)
		if uid != "" {
			return uid, nil
		}
		lastErr = err
		select {
		case <-wctx.Done():
		case <-time.After(delay):
		}
	}
	why := "there is none yet"
	if lastErr != nil && !errors.Is(lastErr, context.DeadlineExceeded) {
		why = lastErr.Error()
	}
	return "", status.Errorf(codes.Unavailable, "the controller has not started %s mounter (pod %s/%s): %s; the pod's Events say why, if it will not",
		whose, m.NamespaceOr(n.finder.Namespace), m.PodName(), why)
}
