package driver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/volume"
)

// What CreateVolume records on what it makes, so that a repeated call is
// recognised and DeleteVolume removes only what the driver made: tags on a
// bucket, metadata on a prefix's marker object.
const (
	tagVolume   = "objfuse.csi.io/volume-name"
	tagCapacity = "objfuse.csi.io/capacity"
	metaVolume  = "Objfuse-Volume-Name"
	metaCap     = "Objfuse-Capacity"
)

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := controllerCaps
	if d.opts.S3Defaults.Endpoint != "" && d.opts.DefaultCredentialsDir != "" {
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

// checkCapabilities accepts filesystem volumes in every access mode.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if c.GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "objfuse volumes are filesystems: volumeMode Block is not supported")
	}
	if c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "volume capability needs an access type (mount)")
	}
	if fs := c.GetMount().GetFsType(); fs != "" && fs != "fuse.objfuse" && fs != "objfuse" {
		return status.Errorf(codes.InvalidArgument, "fsType %q: objfuse serves only its own filesystem (leave fsType empty)", fs)
	}
	if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return status.Error(codes.InvalidArgument, "volume capability needs an access mode")
	}
	return nil
}

func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

// requestedCapacity is the size to record: S3 has no size, so it is what
// the user asked for, reported back but not enforced.
func requestedCapacity(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity may not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.InvalidArgument, "required bytes %d exceed limit bytes %d", req, lim)
	}
	if req == 0 {
		return lim, nil
	}
	return req, nil
}

func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "objfuse does not clone volumes or restore snapshots (dataSource must be empty)")
	}
	capacity, err := requestedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	p, err := volume.ParseParams(req.GetParameters(), d.opts.S3Defaults)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "StorageClass %v", err)
	}
	creds, err := d.credentials(req.GetSecrets(), lifecycle.ProvisionerSecret)
	if err != nil {
		return nil, err
	}
	a, err := d.s3Admin(p.S3, creds)
	if err != nil {
		return nil, err
	}
	defer d.locks.lock("create/" + name)()

	v := volume.Volume{ID: volume.ID{S3: p.S3}, Mount: p.Mount, Mounter: p.Mounter}
	if p.SharedBucket == "" {
		v.Bucket = volume.BucketFor(name)
		capacity, err = d.createBucket(ctx, a, p.S3.Region, v.Bucket, name, capacity)
	} else {
		v.Bucket, v.Prefix = p.SharedBucket, volume.PrefixFor(p.BasePrefix, name)
		capacity, err = d.createPrefix(ctx, a, v.Bucket, v.Prefix, name, capacity)
	}
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      v.ID.String(),
		CapacityBytes: capacity,
		VolumeContext: v.Context(),
	}}, nil
}

// createBucket makes the volume's bucket and tags it, or recognises it as
// made before for the same volume name.
func (d *Driver) createBucket(ctx context.Context, a *s3store.Admin, region, bucket, name string, capacity int64) (int64, error) {
	what := fmt.Sprintf("create bucket %q for volume %q", bucket, name)
	err := a.MakeBucket(ctx, bucket, region)
	if err != nil {
		if !errors.Is(err, s3store.ErrBucketOwned) && !errors.Is(err, s3store.ErrBucketTaken) {
			return 0, s3Status(err, what)
		}
		// Ours from an earlier call? Its tags say.
		have, terr := a.BucketTags(ctx, bucket)
		if terr != nil {
			if errors.Is(err, s3store.ErrBucketTaken) {
				return 0, s3Status(err, what)
			}
			return 0, s3Status(terr, what)
		}
		switch {
		case have[tagVolume] == name:
			recorded, _ := strconv.ParseInt(have[tagCapacity], 10, 64)
			if recorded != capacity {
				return 0, status.Errorf(codes.AlreadyExists, "volume %q exists with capacity %d, not %d", name, recorded, capacity)
			}
			return capacity, nil
		case have[tagVolume] != "":
			return 0, status.Errorf(codes.AlreadyExists, "bucket %q belongs to another volume (%q)", bucket, have[tagVolume])
		}
		if empty, err := a.BucketEmpty(ctx, bucket); err != nil {
			return 0, s3Status(err, what)
		} else if !empty {
			return 0, status.Errorf(codes.AlreadyExists, "bucket %q already exists with data and was not made by objfuse; use a static PersistentVolume to mount it", bucket)
		}
		// An empty, untagged bucket: an earlier call made it and failed
		// before tagging. Finish the job.
	}
	if err := a.SetBucketTags(ctx, bucket, map[string]string{tagVolume: tagValue(name), tagCapacity: strconv.FormatInt(capacity, 10)}); err != nil {
		return 0, s3Status(err, what+": tag it")
	}
	d.log.Info("created bucket", "bucket", bucket, "volume", name, "capacity", capacity)
	return capacity, nil
}

// tagValue fits a volume name into an S3 tag value (256 characters).
func tagValue(name string) string {
	if len(name) <= 256 {
		return name
	}
	return name[:200] + "-" + volume.Key(name)
}

// createPrefix makes the volume's marker object in a shared bucket, or
// recognises it as made before for the same volume name. The shared
// bucket is the admin's to make: missing, it is FailedPrecondition.
func (d *Driver) createPrefix(ctx context.Context, a *s3store.Admin, bucket, prefix, name string, capacity int64) (int64, error) {
	what := fmt.Sprintf("create prefix %q in bucket %q for volume %q", prefix, bucket, name)
	noBucket := func(err error) error {
		if errors.Is(err, store.ErrNoBucket) {
			return status.Errorf(codes.FailedPrecondition, "%s: the shared bucket %q does not exist at %s: create it first", what, bucket, a.Endpoint())
		}
		return s3Status(err, what)
	}
	meta, err := a.Marker(ctx, bucket, prefix)
	switch {
	case err == nil:
		owner := meta[metaVolume]
		if owner != tagValue(name) {
			return 0, status.Errorf(codes.AlreadyExists, "prefix %q in bucket %q already exists and belongs to %q", prefix, bucket, owner)
		}
		recorded, _ := strconv.ParseInt(meta[metaCap], 10, 64)
		if recorded != capacity {
			return 0, status.Errorf(codes.AlreadyExists, "volume %q exists with capacity %d, not %d", name, recorded, capacity)
		}
		return capacity, nil
	case !errors.Is(err, store.ErrNotExist):
		return 0, noBucket(err)
	}
	if err := a.PutMarker(ctx, bucket, prefix, map[string]string{metaVolume: tagValue(name), metaCap: strconv.FormatInt(capacity, 10)}); err != nil {
		return 0, noBucket(err)
	}
	d.log.Info("created prefix", "bucket", bucket, "prefix", prefix, "volume", name, "capacity", capacity)
	return capacity, nil
}

func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	id, err := volume.ParseID(req.GetVolumeId())
	if err != nil {
		// Not ours, or malformed: nothing of ours to delete.
		d.log.Info("delete: not an objfuse volume id; nothing to do", "volume", req.GetVolumeId())
		return &csi.DeleteVolumeResponse{}, nil
	}
	creds, err := d.credentials(req.GetSecrets(), lifecycle.ProvisionerSecret)
	if err != nil {
		return nil, err
	}
	a, err := d.s3Admin(id.S3, creds)
	if err != nil {
		return nil, err
	}
	defer d.locks.lock("create/" + req.GetVolumeId())()
	if id.Prefix == "" {
		err = d.deleteBucket(ctx, a, id)
	} else {
		err = d.deletePrefix(ctx, a, id)
	}
	if err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteBucket deletes the volume's bucket if objfuse made it (its tags
// say); a bucket gone already is success.
func (d *Driver) deleteBucket(ctx context.Context, a *s3store.Admin, id volume.ID) error {
	what := fmt.Sprintf("delete bucket %q", id.Bucket)
	t, err := a.BucketTags(ctx, id.Bucket)
	switch {
	case errors.Is(err, store.ErrNoBucket):
		return nil
	case err != nil:
		return s3Status(err, what)
	case t[tagVolume] == "":
		// MinIO answers "no tags" for a bucket deleted a moment ago,
		// too (a repeated DeleteVolume): only warn about one that is there.
		if ok, err := a.BucketExists(ctx, id.Bucket); err == nil && !ok {
			return nil
		}
		d.log.Warn("delete: bucket was not made by objfuse; leaving it and its data", "bucket", id.Bucket)
		return nil
	}
	if err := a.RemoveAll(ctx, id.Bucket, ""); err != nil {
		return s3Status(err, what+": remove objects")
	}
	if err := a.RemoveBucket(ctx, id.Bucket); err != nil && !errors.Is(err, store.ErrNoBucket) {
		return s3Status(err, what)
	}
	d.log.Info("deleted bucket", "bucket", id.Bucket)
	return nil
}

// deletePrefix deletes the volume's objects in a shared bucket, its
// marker last; without the marker (or the bucket) it is gone already.
func (d *Driver) deletePrefix(ctx context.Context, a *s3store.Admin, id volume.ID) error {
	what := fmt.Sprintf("delete prefix %q in bucket %q", id.Prefix, id.Bucket)
	_, err := a.Marker(ctx, id.Bucket, id.Prefix)
	switch {
	case errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrNoBucket):
		return nil
	case err != nil:
		return s3Status(err, what)
	}
	if err := a.RemoveAll(ctx, id.Bucket, id.Prefix); err != nil {
		return s3Status(err, what)
	}
	d.log.Info("deleted prefix", "bucket", id.Bucket, "prefix", id.Prefix)
	return nil
}

// volumeExists says whether id's bucket (and marker, for a prefix) exists.
func volumeExists(ctx context.Context, a *s3store.Admin, id volume.ID) (bool, error) {
	if id.Prefix == "" {
		return a.BucketExists(ctx, id.Bucket)
	}
	_, err := a.Marker(ctx, id.Bucket, id.Prefix)
	if errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrNoBucket) {
		return false, nil
	}
	return err == nil, err
}

func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	v, err := volume.FromContext(req.GetVolumeId(), req.GetVolumeContext(), d.opts.S3Defaults)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", req.GetVolumeId(), err)
	}
	if err := d.checkExists(ctx, v.ID, req.GetSecrets(), req.GetVolumeId()); err != nil {
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
func (d *Driver) checkExists(ctx context.Context, id volume.ID, secrets map[string]string, volumeID string) error {
	creds, err := d.credentials(secrets, lifecycle.PublishSecret)
	if err != nil {
		return err
	}
	a, err := d.s3Admin(id.S3, creds)
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
func (d *Driver) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries may not be negative")
	}
	if tok := req.GetStartingToken(); tok != "" {
		if _, err := volume.ParseID(tok); err != nil {
			return nil, status.Errorf(codes.Aborted, "starting token %q was not made by this driver's ListVolumes", tok)
		}
	}
	a, s, err := d.defaultAdmin()
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
	sort.Slice(entries, func(i, j int) bool { return entries[i].Volume.VolumeId < entries[j].Volume.VolumeId })
	if tok := req.GetStartingToken(); tok != "" {
		i := sort.Search(len(entries), func(i int) bool { return entries[i].Volume.VolumeId > tok })
		entries = entries[i:]
	}
	next := ""
	if max := int(req.GetMaxEntries()); max > 0 && len(entries) > max {
		entries = entries[:max]
		next = entries[max-1].Volume.VolumeId
	}
	return &csi.ListVolumesResponse{Entries: entries, NextToken: next}, nil
}
