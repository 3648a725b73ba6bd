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
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/volume"
)

// Snapshots. A snapshot is a server-side copy of the volume's objects,
// with their metadata (modes, owners, mtimes), into a bucket of its own
// (a volume with a bucket of its own) or a prefix beside the volumes in
// the shared bucket (volume.SnapshotPrefixFor). Its id is a volume id
// naming that bucket or prefix. The copy runs in the background:
// CreateSnapshot answers ready_to_use false, and csi-snapshotter asks
// again until it is true. Each object is copied whole, in one version; a
// volume written during the copy is caught object by object, not at one
// instant (as a backup of a mounted filesystem is).

// snapshotWait is how long CreateSnapshot waits for its copy before it
// answers "not ready yet": a small volume's snapshot is ready at once.
const snapshotWait = 5 * time.Second

func (c *controllerServer) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name := req.GetName()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "snapshot name is required")
	case req.GetSourceVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "source volume id is required")
	}
	src, err := volume.ParseID(req.GetSourceVolumeId())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "source volume %q is not an objfuse volume: %v", req.GetSourceVolumeId(), err)
	}
	a, err := c.s3.adminFor(src.S3, req.GetSecrets(), lifecycle.SnapshotSecret)
	if err != nil {
		return nil, err
	}
	defer c.locks.lock("snapshot/" + name)()
	if ok, err := volumeExists(ctx, a, src); err != nil {
		return nil, s3Status(err, "look up source volume "+req.GetSourceVolumeId())
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "source volume %q: bucket %q (prefix %q) does not exist at %s", req.GetSourceVolumeId(), src.Bucket, src.Prefix, src.S3.Endpoint)
	}
	snap := volume.ID{S3: src.S3, Bucket: volume.BucketFor(name)}
	if src.Prefix != "" {
		snap = volume.ID{S3: src.S3, Bucket: src.Bucket, Prefix: volume.SnapshotPrefixFor(src.Prefix, name)}
	}
	rec := recordOf{a: a, bucket: snap.Bucket, prefix: snap.Prefix}
	source := src.Bucket + "/" + src.Prefix
	facts, err := c.makeSnapshotPlace(ctx, a, rec, src.S3.Region, name)
	if err != nil {
		return nil, err
	}
	if facts[factSource] != "" && facts[factSource] != source {
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists of another volume (%s), not of %q", name, facts[factSource], req.GetSourceVolumeId())
	}
	if facts[factState] == "" {
		c.indexSnapshots(ctx, a, snap.Bucket, volume.BaseOf(src.Prefix))
		facts = map[string]string{factSnapshot: tagValue(name), factSource: source, factState: stateCopying, factCreated: unixNow()}
		if err := rec.write(ctx, facts); err != nil {
			return nil, s3Status(err, fmt.Sprintf("record snapshot %q", name))
		}
	}
	out := func(ready bool, size string) *csi.CreateSnapshotResponse {
		created, _ := strconv.ParseInt(facts[factCreated], 10, 64)
		bytes, _ := strconv.ParseInt(size, 10, 64)
		return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
			SnapshotId: snap.String(), SourceVolumeId: req.GetSourceVolumeId(), SizeBytes: bytes,
			CreationTime: timestamppb.New(time.Unix(created, 0)), ReadyToUse: ready,
		}}
	}
	if facts[factState] == stateReady {
		return out(true, facts[factSize]), nil
	}
	job := c.copies.start("snapshot/"+name, func(ctx context.Context, j *copyJob) error {
		if err := copyTree(ctx, a, s3store.Tree{Bucket: src.Bucket, Prefix: src.Prefix}, s3store.Tree{Bucket: snap.Bucket, Prefix: snap.Prefix}, j); err != nil {
			return err
		}
		return rec.write(ctx, map[string]string{factState: stateReady, factSize: strconv.FormatInt(j.sofar.Bytes, 10)})
	})
	if !job.waitBriefly(ctx, snapshotWait) {
		c.log.Info("snapshot copying", "snapshot", name, "progress", job.progress())
		total, _ := job.counts()
		return out(false, strconv.FormatInt(total.Bytes, 10)), nil
	}
	if job.err != nil {
		return nil, s3Status(job.err, fmt.Sprintf("copy volume %q into snapshot %q", req.GetSourceVolumeId(), name))
	}
	c.log.Info("snapshot taken", "snapshot", name, "volume", req.GetSourceVolumeId(), "copied", job.progress())
	_, sofar := job.counts()
	return out(true, strconv.FormatInt(sofar.Bytes, 10)), nil
}

// indexSnapshots names base in the index of bucket's snapshot bases
// (volume.SnapshotBases), for a listing of every snapshot to find those
// of base's volumes. Best effort: keys that may write only below base
// cannot write the index at the bucket's root, and their snapshots are
// still found by id and by source volume. An entry stays when base's
// last snapshot goes: it costs a listing of an empty folder, and
// removing it could race another snapshot of base.
func (c *controllerServer) indexSnapshots(ctx context.Context, a *s3store.Admin, bucket, base string) {
	if base == "" {
		return // the root's snapshot folder is listed anyway
	}
	key := volume.SnapshotBases + base
	if _, err := a.Marker(ctx, bucket, key); err == nil {
		return
	}
	if err := a.PutMarker(ctx, bucket, key, nil); err != nil {
		c.log.Warn("snapshot not indexed: only a listing by id or by source volume finds it", "bucket", bucket, "base", base, "err", err)
	}
}

// makeSnapshotPlace makes the snapshot's bucket (a prefix needs nothing
// made: its marker is its record) and returns the facts recorded there,
// empty when new. A bucket or prefix that holds something else is
// AlreadyExists.
func (c *controllerServer) makeSnapshotPlace(ctx context.Context, a *s3store.Admin, rec recordOf, region, name string) (map[string]string, error) {
	what := fmt.Sprintf("create snapshot %q", name)
	if rec.prefix == "" {
		err := a.MakeBucket(ctx, rec.bucket, region)
		if err != nil && !errors.Is(err, s3store.ErrBucketOwned) {
			return nil, s3Status(err, what+": make bucket "+rec.bucket)
		}
	}
	facts, err := rec.read(ctx)
	switch {
	case errors.Is(err, store.ErrNotExist):
		return map[string]string{}, nil // a prefix not made yet
	case err != nil:
		return nil, s3Status(err, what)
	case facts[factSnapshot] != "" && facts[factSnapshot] != tagValue(name):
		return nil, status.Errorf(codes.AlreadyExists, "%s: bucket %q (prefix %q) holds snapshot %q", what, rec.bucket, rec.prefix, facts[factSnapshot])
	case facts[factSnapshot] == "" && rec.prefix == "":
		if empty, err := a.BucketEmpty(ctx, rec.bucket); err != nil {
			return nil, s3Status(err, what)
		} else if !empty {
			return nil, status.Errorf(codes.AlreadyExists, "%s: bucket %q exists with data and was not made by objfuse", what, rec.bucket)
		}
	}
	return facts, nil
}

// DeleteSnapshot removes a snapshot's copy; one gone already, or an id
// that is not an objfuse snapshot's, is success (and nothing is removed).
func (c *controllerServer) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot id is required")
	}
	id, err := volume.ParseID(req.GetSnapshotId())
	if err != nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	a, err := c.s3.adminFor(id.S3, req.GetSecrets(), lifecycle.SnapshotSecret)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("delete snapshot %q", req.GetSnapshotId())
	facts, err := recordOf{a: a, bucket: id.Bucket, prefix: id.Prefix}.read(ctx)
	switch {
	case errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrNoBucket):
		return &csi.DeleteSnapshotResponse{}, nil
	case err != nil:
		return nil, s3Status(err, what)
	case facts[factSnapshot] == "":
		c.log.Warn("delete snapshot: not a snapshot objfuse made; leaving it", "bucket", id.Bucket, "prefix", id.Prefix)
		return &csi.DeleteSnapshotResponse{}, nil
	}
	defer c.locks.lock("snapshot/" + facts[factSnapshot])()
	c.copies.stop("snapshot/" + facts[factSnapshot])
	if id.Prefix == "" {
		err = c.removeBucket(ctx, a, id.Bucket)
	} else {
		err = c.deletePrefix(ctx, a, id)
	}
	if err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}
