package driver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/volume"
)

// Expansion. A volume's size is where CreateVolume recorded it (a tag on
// its bucket, metadata on its marker); ControllerExpandVolume records the
// new one there, and its mounters enforce it: the one kubelet asks
// (NodeExpandVolume) at once, every other at its next count of the
// volume's usage, when it reads the recorded size (fusefs.Options
// CapacitySource). Nothing is remounted.

// ControllerExpandVolume records the volume's new size. A size at or below
// the recorded one is success: a volume does not shrink.
func (c *controllerServer) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	want, err := requestedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if want == 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity range is required: the size to expand to")
	}
	id, err := volume.ParseID(req.GetVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not an objfuse volume: %v", req.GetVolumeId(), err)
	}
	a, err := c.s3.adminFor(id.S3, req.GetSecrets(), lifecycle.ExpandSecret)
	if err != nil {
		return nil, err
	}
	defer c.locks.lock("create/" + req.GetVolumeId())()
	what := fmt.Sprintf("expand volume %q to %d bytes", req.GetVolumeId(), want)
	have, err := expand(ctx, recordOf{a: a, bucket: id.Bucket, prefix: id.Prefix}, want)
	switch {
	case errors.Is(err, errNotMade):
		return nil, status.Errorf(codes.FailedPrecondition, "%s: bucket %q (prefix %q) was not made by objfuse, which records no size there; a static volume's size is its capacityBytes attribute", what, id.Bucket, id.Prefix)
	case errors.Is(err, store.ErrNoBucket) || errors.Is(err, store.ErrNotExist):
		return nil, status.Errorf(codes.NotFound, "%s: bucket %q (prefix %q) does not exist at %s", what, id.Bucket, id.Prefix, id.S3.Endpoint)
	case err != nil:
		return nil, s3Status(err, what)
	}
	if have > want {
		want = have
	} else {
		c.log.Info("expanded volume", "volume", req.GetVolumeId(), "from", have, "to", want)
	}
	// The node side tells a running mounter at once; without it, the
	// mounter would take the size only at its next count.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: want, NodeExpansionRequired: true}, nil
}

// expand records size where the volume's is unless a larger one is
// there, and returns the size recorded before.
func expand(ctx context.Context, rec recordOf, size int64) (int64, error) {
	facts, err := rec.read(ctx)
	if err != nil {
		return 0, err
	}
	if rec.prefix == "" {
		if ok, err := rec.a.BucketExists(ctx, rec.bucket); err == nil && !ok {
			return 0, store.ErrNoBucket // MinIO answers a deleted bucket's tags as none
		}
	}
	if facts[factVolume] == "" {
		return 0, errNotMade
	}
	have, _ := strconv.ParseInt(facts[factCapacity], 10, 64)
	if have >= size {
		return have, nil
	}
	return have, rec.write(ctx, map[string]string{factCapacity: strconv.FormatInt(size, 10)})
}

// errNotMade: the bucket or prefix carries no record of objfuse making it.
var errNotMade = errors.New("not made by objfuse")

// resizeWait bounds NodeExpandVolume's call to the mounter.
const resizeWait = 10 * time.Second

// NodeExpandVolume gives the volume's mounter on this node its new size.
// A mounter that cannot be told takes it from where the controller
// recorded it at its next count of the volume's usage: the expansion is
// not failed for it.
func (n *nodeServer) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	size, err := requestedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	st, err := n.stagedAt(req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return &csi.NodeExpandVolumeResponse{}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, resizeWait)
	defer cancel()
	if _, err := handoff.Call(cctx, n.mounterSocket(st), handoff.Request{Op: handoff.OpResize, CapacityBytes: size}, -1); err != nil {
		n.log.Warn("the mounter did not take the volume's new size; it reads it from S3 at its next count", "volume", req.GetVolumeId(), "bytes", size, "err", err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
