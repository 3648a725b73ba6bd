package driver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// What CreateVolume records on what it makes, so that a repeated call is
// recognised and DeleteVolume removes only what the driver made: tags on a
// bucket, metadata on a prefix's marker object.
const (
	tagVolume   = "objfuse.csi.io/volume-name"
	tagCapacity = volume.TagCapacity
	metaVolume  = "Objfuse-Volume-Name"
	metaCap     = volume.MetaCapacity
)

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

func (c *controllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity, err := requestedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	p, err := volume.ParseParams(req.GetParameters(), c.s3.defaults)
	if err == nil {
		err = p.ResolveMounterNamespace(req.GetParameters()[volume.ParamPVCNamespace])
	}
	if _, set := req.GetParameters()[volume.ParamCapacityBytes]; set && err == nil {
		err = &volume.ParseError{Param: volume.ParamCapacityBytes, Reason: "a volume's size is its PVC's storage request; " + volume.ParamEnforceCapacity + " says whether it is enforced"}
	}
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "StorageClass %v", err)
	}
	if p.Mounter.Namespace == c.namespaces.Driver {
		p.Mounter.Namespace = "" // a PVC in the driver's own namespace: as without the parameter
	}
	if _, err := c.namespaces.Of(spec.Mounter{VolumeID: name, Volume: volume.Volume{Mounter: p.Mounter}}); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	a, err := c.s3.adminFor(p.S3, req.GetSecrets(), lifecycle.ProvisionerSecret)
	if err != nil {
		return nil, err
	}
	defer c.locks.lock("create/" + name)()
	var from content
	if src := req.GetVolumeContentSource(); src != nil {
		limit := int64(0)
		if p.EnforceCapacity {
			limit = capacity
		}
		if from, err = c.contentOf(ctx, a, p.S3.Endpoint, src, limit); err != nil {
			return nil, err
		}
	}

	v := volume.Volume{ID: volume.ID{S3: p.S3}, Mount: p.Mount, Mounter: p.Mounter}
	if p.SharedBucket == "" {
		v.Bucket = volume.BucketFor(name)
		capacity, err = c.createBucket(ctx, a, p.S3.Region, v.Bucket, name, capacity)
	} else {
		v.Bucket, v.Prefix = p.SharedBucket, volume.PrefixFor(p.BasePrefix, name)
		capacity, err = c.createPrefix(ctx, a, v.Bucket, v.Prefix, name, capacity)
	}
	if err != nil {
		return nil, err
	}
	if p.EnforceCapacity && capacity > 0 {
		v.Mount[volume.ParamCapacityBytes] = strconv.FormatInt(capacity, 10)
	}
	if src := req.GetVolumeContentSource(); src != nil {
		if err := c.fill(ctx, a, name, v.ID, from); err != nil {
			return nil, err
		}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      v.ID.String(),
		CapacityBytes: capacity,
		VolumeContext: v.Context(),
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

// createBucket makes the volume's bucket and tags it, or recognises it as
// made before for the same volume name.
func (c *controllerServer) createBucket(ctx context.Context, a *s3store.Admin, region, bucket, name string, capacity int64) (int64, error) {
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
	c.log.Info("created bucket", "bucket", bucket, "volume", name, "capacity", capacity)
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
func (c *controllerServer) createPrefix(ctx context.Context, a *s3store.Admin, bucket, prefix, name string, capacity int64) (int64, error) {
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
	c.log.Info("created prefix", "bucket", bucket, "prefix", prefix, "volume", name, "capacity", capacity)
	return capacity, nil
}

func (c *controllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	id, err := volume.ParseID(req.GetVolumeId())
	if err != nil {
		// Not ours, or malformed: nothing of ours to delete.
		c.log.Info("delete: not an objfuse volume id; nothing to do", "volume", req.GetVolumeId())
		return &csi.DeleteVolumeResponse{}, nil
	}
	a, err := c.s3.adminFor(id.S3, req.GetSecrets(), lifecycle.ProvisionerSecret)
	if err != nil {
		return nil, err
	}
	defer c.locks.lock("create/" + req.GetVolumeId())()
	if id.Prefix == "" {
		err = c.deleteBucket(ctx, a, id)
	} else {
		err = c.deletePrefix(ctx, a, id)
	}
	if err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteBucket deletes the volume's bucket if objfuse made it (its tags
// say); a bucket gone already is success.
func (c *controllerServer) deleteBucket(ctx context.Context, a *s3store.Admin, id volume.ID) error {
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
		c.log.Warn("delete: bucket was not made by objfuse; leaving it and its data", "bucket", id.Bucket)
		return nil
	}
	return c.removeBucket(ctx, a, id.Bucket)
}

// removeBucket removes a bucket the driver made, and its objects.
func (c *controllerServer) removeBucket(ctx context.Context, a *s3store.Admin, bucket string) error {
	what := fmt.Sprintf("delete bucket %q", bucket)
	if err := a.RemoveAll(ctx, bucket, ""); err != nil {
		return s3Status(err, what+": remove objects")
	}
	if err := a.RemoveBucket(ctx, bucket); err != nil && !errors.Is(err, store.ErrNoBucket) {
		return s3Status(err, what)
	}
	c.log.Info("deleted bucket", "bucket", bucket)
	return nil
}

// deletePrefix deletes the volume's objects in a shared bucket, its
// marker last; without the marker (or the bucket) it is gone already.
func (c *controllerServer) deletePrefix(ctx context.Context, a *s3store.Admin, id volume.ID) error {
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
	c.log.Info("deleted prefix", "bucket", id.Bucket, "prefix", id.Prefix)
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
