package driver

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/volume"
)

// controllerServer serves the CSI Controller service: it makes and
// deletes buckets (or prefixes in a shared one), and publishes a volume
// to a node by launching its mounter there (controller_publish.go).
type controllerServer struct {
	csi.UnimplementedControllerServer
	s3       *s3Admins
	launcher lifecycle.Launcher
	locks    keyLocks // "create/<name>", "snapshot/<name>" and "publish/<mounter key>"
	copies   copies   // snapshots and volumes being filled
	log      *slog.Logger
	// namespaces are where mounters may run: CreateVolume refuses a
	// volume whose mounters could not.
	namespaces lifecycle.Namespaces
}

var _ csi.ControllerServer = (*controllerServer)(nil)

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
}

func (c *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := controllerCaps
	if c.s3.defaults.Endpoint != "" && c.s3.creds.DefaultDir != "" {
		// Listing needs S3 access of the driver's own: ListVolumes carries no secrets.
		types = append(types[:len(types):len(types)], csi.ControllerServiceCapability_RPC_LIST_VOLUMES)
	}
	var caps []*csi.ControllerServiceCapability
	for _, t := range types {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (c *controllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	v, err := volume.FromContext(req.GetVolumeId(), req.GetVolumeContext(), c.s3.defaults)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", req.GetVolumeId(), err)
	}
	if err := c.checkExists(ctx, v.ID, req.GetSecrets(), req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// checkExists is NotFound when the volume's bucket or prefix is gone.
func (c *controllerServer) checkExists(ctx context.Context, id volume.ID, secrets map[string]string, volumeID string) error {
	a, err := c.s3.adminFor(id.S3, secrets, lifecycle.PublishSecret)
	if err != nil {
		return err
	}
	ok, err := volumeExists(ctx, a, id)
	if err != nil {
		return s3Status(err, "look up volume "+volumeID)
	}
	if !ok {
		return status.Errorf(codes.NotFound, "volume %q: bucket %q (prefix %q) does not exist at %s", volumeID, id.Bucket, id.Prefix, id.S3.Endpoint)
	}
	return nil
}

// ListVolumes lists the buckets this driver made at its default endpoint,
// ordered by id. The token is the last id returned, so it stays valid when
// volumes before it are deleted.
func (c *controllerServer) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if err := checkPage(req.GetMaxEntries(), req.GetStartingToken(), "ListVolumes"); err != nil {
		return nil, err
	}
	a, s, err := c.s3.defaultAdmin()
	if err != nil {
		return nil, err
	}
	buckets, err := a.Buckets(ctx)
	if err != nil {
		return nil, s3Status(err, "list buckets")
	}
	var entries []*csi.ListVolumesResponse_Entry
	for _, b := range buckets {
		m, err := a.BucketTags(ctx, b)
		switch {
		case errors.Is(err, store.ErrNoBucket):
			continue // deleted since the listing
		case err != nil:
			return nil, s3Status(err, "list volumes: tags of "+b)
		case m[tagVolume] == "":
			continue
		}
		capacity, _ := strconv.ParseInt(m[tagCapacity], 10, 64)
		id := volume.ID{S3: s, Bucket: b}
		entries = append(entries, &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: id.String(), CapacityBytes: capacity}})
	}
	entries, next := pageOf(entries, func(e *csi.ListVolumesResponse_Entry) string { return e.Volume.VolumeId }, req.GetStartingToken(), req.GetMaxEntries())
	return &csi.ListVolumesResponse{Entries: entries, NextToken: next}, nil
}
