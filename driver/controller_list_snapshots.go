package driver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/volume"
)

// ListSnapshots reads the snapshots' records (records.go), so it knows
// what CreateSnapshot made, also after a restart: by snapshot id, the one
// record the id names; by source volume, the snapshot buckets of a
// bucket's volume (every bucket's tags) or the snapshot folder beside a
// prefix's volume; with neither, every snapshot at the driver's default
// endpoint. A listing across buckets passes over those the call's
// credentials cannot read (another tenant's); a lookup by id or source
// they cannot read is an error, which says why. Without credentials the
// driver's own are used, as for ListVolumes. Ordered by id; the token is
// the last id returned (paging.go).
func (c *controllerServer) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if err := checkPage(req.GetMaxEntries(), req.GetStartingToken(), "ListSnapshots"); err != nil {
		return nil, err
	}
	var (
		found []*csi.Snapshot
		err   error
	)
	switch {
	case req.GetSnapshotId() != "":
		found, err = c.snapshotByID(ctx, req.GetSnapshotId(), req.GetSecrets())
	case req.GetSourceVolumeId() != "":
		found, err = c.snapshotsOf(ctx, req.GetSourceVolumeId(), req.GetSecrets())
	default:
		found, err = c.everySnapshot(ctx, req.GetSecrets())
	}
	if err != nil {
		return nil, err
	}
	if src := req.GetSourceVolumeId(); src != "" {
		found = slices.DeleteFunc(found, func(s *csi.Snapshot) bool { return s.SourceVolumeId != src })
	}
	page, next := pageOf(found, func(s *csi.Snapshot) string { return s.SnapshotId }, req.GetStartingToken(), req.GetMaxEntries())
	entries := make([]*csi.ListSnapshotsResponse_Entry, len(page))
	for i, s := range page {
		entries[i] = &csi.ListSnapshotsResponse_Entry{Snapshot: s}
	}
	return &csi.ListSnapshotsResponse{Entries: entries, NextToken: next}, nil
}

// snapshotByID is the snapshot id names, if it is one and is there.
func (c *controllerServer) snapshotByID(ctx context.Context, snapshotID string, secrets map[string]string) ([]*csi.Snapshot, error) {
	id, err := volume.ParseID(snapshotID)
	if err != nil {
		return nil, nil // not an objfuse snapshot: none has that id
	}
	a, err := c.s3.listerFor(id.S3, secrets)
	if err != nil {
		return nil, err
	}
	s, err := snapshotAt(ctx, a, id)
	if err != nil {
		return nil, s3Status(err, "read the record of snapshot "+snapshotID)
	}
	if s == nil {
		return nil, nil
	}
	return []*csi.Snapshot{s}, nil
}

// snapshotsOf are the snapshots in the place snapshots of the volume
// sourceID go: ListSnapshots keeps those of that volume.
func (c *controllerServer) snapshotsOf(ctx context.Context, sourceID string, secrets map[string]string) ([]*csi.Snapshot, error) {
	src, err := volume.ParseID(sourceID)
	if err != nil {
		return nil, nil // not an objfuse volume: it has no snapshots
	}
	a, err := c.s3.listerFor(src.S3, secrets)
	if err != nil {
		return nil, err
	}
	if src.Prefix == "" {
		buckets, err := a.Buckets(ctx)
		if err != nil {
			return nil, s3Status(err, "list buckets")
		}
		return snapshotBuckets(ctx, a, src.S3, buckets)
	}
	found, err := snapshotsIn(ctx, a, src.S3, src.Bucket, volume.BaseOf(src.Prefix))
	if err != nil {
		return nil, s3Status(err, "list the snapshots of volume "+sourceID)
	}
	return found, nil
}

// everySnapshot lists the default endpoint, with the call's credentials
// or the driver's own. A bucket these credentials cannot read, or that
// answers otherwise than as objfuse's (another region's), is passed
// over: it holds no snapshot of theirs.
func (c *controllerServer) everySnapshot(ctx context.Context, secrets map[string]string) ([]*csi.Snapshot, error) {
	s := c.s3.defaultS3()
	if s.Endpoint == "" {
		return nil, status.Error(codes.FailedPrecondition, "ListSnapshots without a snapshot id or source volume lists the driver's default endpoint, and the driver has none (--s3-endpoint)")
	}
	a, err := c.s3.listerFor(s, secrets)
	if err != nil {
		return nil, err
	}
	buckets, err := a.Buckets(ctx)
	if err != nil {
		return nil, s3Status(err, "list buckets")
	}
	var found []*csi.Snapshot
	for _, b := range buckets {
		more, err := snapshotsOfBucket(ctx, a, s, b)
		if passOver(err) {
			c.log.Info("ListSnapshots passes over a bucket", "bucket", b, "err", err)
			continue
		}
		if err != nil {
			return nil, s3Status(err, "list the snapshots in bucket "+b)
		}
		found = append(found, more...)
	}
	return found, nil
}

// snapshotsOfBucket is the bucket itself if it is a snapshot, else the
// snapshots of the prefix volumes in it, unless it is a volume's own.
func snapshotsOfBucket(ctx context.Context, a *s3store.Admin, s volume.S3, bucket string) ([]*csi.Snapshot, error) {
	facts, err := recordOf{a: a, bucket: bucket}.read(ctx)
	switch {
	case err != nil:
		return nil, err
	case facts[factSnapshot] != "":
		if snap := snapshotOf(volume.ID{S3: s, Bucket: bucket}, facts); snap != nil {
			return []*csi.Snapshot{snap}, nil
		}
		return nil, nil
	case facts[factVolume] != "":
		return nil, nil // a volume's bucket holds its files, no snapshot
	}
	return snapshotsInBucket(ctx, a, s, bucket)
}

// snapshotBuckets are the snapshots among buckets (of their own); a
// bucket these credentials cannot read is passed over.
func snapshotBuckets(ctx context.Context, a *s3store.Admin, s volume.S3, buckets []string) ([]*csi.Snapshot, error) {
	var found []*csi.Snapshot
	for _, b := range buckets {
		snap, err := snapshotAt(ctx, a, volume.ID{S3: s, Bucket: b})
		switch {
		case passOver(err):
			continue
		case err != nil:
			return nil, s3Status(err, "read the tags of bucket "+b)
		case snap != nil:
			found = append(found, snap)
		}
	}
	return found, nil
}

// snapshotsInBucket are the snapshots of prefix volumes in bucket: those
// of volumes at its root, and of every base its index names.
func snapshotsInBucket(ctx context.Context, a *s3store.Admin, s volume.S3, bucket string) ([]*csi.Snapshot, error) {
	names, err := a.Children(ctx, bucket, volume.SnapshotsUnder(""), false)
	if err != nil {
		return nil, err
	}
	found, err := snapshotsAmong(ctx, a, s, bucket, names)
	if err != nil || !slices.Contains(names, volume.SnapshotBases) {
		return found, err
	}
	bases, err := a.Children(ctx, bucket, volume.SnapshotBases, true)
	if err != nil {
		return nil, err
	}
	for _, key := range bases {
		more, err := snapshotsIn(ctx, a, s, bucket, strings.TrimPrefix(key, volume.SnapshotBases))
		if err != nil {
			return nil, err
		}
		found = append(found, more...)
	}
	return found, nil
}

// snapshotsIn are the snapshots of the volumes under base in bucket.
func snapshotsIn(ctx context.Context, a *s3store.Admin, s volume.S3, bucket, base string) ([]*csi.Snapshot, error) {
	names, err := a.Children(ctx, bucket, volume.SnapshotsUnder(base), false)
	if err != nil {
		return nil, err
	}
	return snapshotsAmong(ctx, a, s, bucket, names)
}

// snapshotsAmong are the snapshots whose folders are among keys.
func snapshotsAmong(ctx context.Context, a *s3store.Admin, s volume.S3, bucket string, keys []string) ([]*csi.Snapshot, error) {
	var found []*csi.Snapshot
	for _, k := range keys {
		if !strings.HasSuffix(k, "/") || k == volume.SnapshotBases {
			continue
		}
		snap, err := snapshotAt(ctx, a, volume.ID{S3: s, Bucket: bucket, Prefix: k})
		if err != nil {
			return nil, err
		}
		if snap != nil {
			found = append(found, snap)
		}
	}
	return found, nil
}

// snapshotAt is the snapshot whose record is at id's bucket or prefix;
// nil when there is none, or the record is not one CreateSnapshot wrote
// there (copied along with a bucket, or made by hand): a snapshot of a
// bucket's volume is a bucket, and one of a prefix's is in the snapshot
// folder beside it.
func snapshotAt(ctx context.Context, a *s3store.Admin, id volume.ID) (*csi.Snapshot, error) {
	facts, err := recordOf{a: a, bucket: id.Bucket, prefix: id.Prefix}.read(ctx)
	if errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrNoBucket) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return snapshotOf(id, facts), nil
}

// snapshotOf is the snapshot the record facts at id describe; nil when
// they describe none that CreateSnapshot made there (see snapshotAt).
func snapshotOf(id volume.ID, facts map[string]string) *csi.Snapshot {
	if facts[factSnapshot] == "" {
		return nil
	}
	srcBucket, srcPrefix, _ := strings.Cut(facts[factSource], "/")
	src := volume.ID{S3: id.S3, Bucket: srcBucket, Prefix: srcPrefix}
	mine := srcPrefix == "" && id.Prefix == "" ||
		srcPrefix != "" && srcBucket == id.Bucket && strings.HasPrefix(id.Prefix, volume.SnapshotsUnder(volume.BaseOf(srcPrefix)))
	if !mine || srcBucket == "" {
		return nil
	}
	snap := &csi.Snapshot{
		SnapshotId:     id.String(),
		SourceVolumeId: src.String(),
		ReadyToUse:     facts[factState] == stateReady,
	}
	snap.SizeBytes, _ = strconv.ParseInt(facts[factSize], 10, 64)
	if created, err := strconv.ParseInt(facts[factCreated], 10, 64); err == nil {
		snap.CreationTime = timestamppb.New(time.Unix(created, 0))
	}
	return snap
}

// passOver says whether a listing across buckets passes over one that
// answered err: one gone since it was listed, one these credentials may
// not read (another tenant's), or one that answers otherwise than as
// objfuse's buckets do (another region's).
func passOver(err error) bool {
	return errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrNoBucket) ||
		errors.Is(err, store.ErrAccess) || errors.Is(err, store.ErrInvalid)
}
