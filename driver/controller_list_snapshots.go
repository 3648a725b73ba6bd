package driver

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
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

// ListSnapshots reads the snapshots' records (records.go), so it knows
// what CreateSnapshot made, also after a restart: by snapshot id, the one
// record the id names; by source volume, the snapshot buckets of a
// bucket's volume (every bucket's tags) or the snapshot folder beside a
// prefix's volume; with neither, every snapshot at the driver's default
// endpoint. Snapshots the call's credentials cannot read are left out: a
// tenant's keys list the tenant's snapshots. Ordered by id; the token is
// the last id returned, so it stays valid when snapshots before it are
// deleted.
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
		found = keep(found, func(s *csi.Snapshot) bool { return s.SourceVolumeId == src })
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
	a, err := c.s3.adminFor(id.S3, secrets, lifecycle.ListSecret)
	if err != nil {
		return nil, err
	}
	s, err := snapshotAt(ctx, a, id)
	if err != nil || s == nil {
		return nil, err
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
	a, err := c.s3.adminFor(src.S3, secrets, lifecycle.ListSecret)
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
	return snapshotsIn(ctx, a, src.S3, src.Bucket, volume.BaseOf(src.Prefix))
}

// everySnapshot lists the default endpoint, with the call's credentials
// or the driver's own.
func (c *controllerServer) everySnapshot(ctx context.Context, secrets map[string]string) ([]*csi.Snapshot, error) {
	a, s, err := c.s3.defaultAdmin()
	if len(secrets) > 0 && s.Endpoint != "" {
		a, err = c.s3.adminFor(s, secrets, lifecycle.ListSecret)
	}
	if err != nil {
		return nil, status.Errorf(status.Code(err), "ListSnapshots without a snapshot id or source volume lists the driver's default endpoint: %s", status.Convert(err).Message())
	}
	buckets, err := a.Buckets(ctx)
	if err != nil {
		return nil, s3Status(err, "list buckets")
	}
	found, err := snapshotBuckets(ctx, a, s, buckets)
	if err != nil {
		return nil, err
	}
	for _, b := range buckets {
		more, err := snapshotsInBucket(ctx, a, s, b)
		if err != nil {
			return nil, err
		}
		found = append(found, more...)
	}
	return found, nil
}

// snapshotBuckets are the snapshots among buckets (of their own).
func snapshotBuckets(ctx context.Context, a *s3store.Admin, s volume.S3, buckets []string) ([]*csi.Snapshot, error) {
	var found []*csi.Snapshot
	for _, b := range buckets {
		snap, err := snapshotAt(ctx, a, volume.ID{S3: s, Bucket: b})
		if err != nil {
			return nil, err
		}
		if snap != nil {
			found = append(found, snap)
		}
	}
	return found, nil
}

// snapshotsInBucket are the snapshots of prefix volumes in bucket: those
// of volumes at its root, and of every base its index names.
func snapshotsInBucket(ctx context.Context, a *s3store.Admin, s volume.S3, bucket string) ([]*csi.Snapshot, error) {
	found, err := snapshotsIn(ctx, a, s, bucket, "")
	if err != nil {
		return nil, err
	}
	bases, err := a.Children(ctx, bucket, volume.SnapshotBases, true)
	if err != nil {
		return nil, unlessUnreadable(err, "list the snapshot index of bucket "+bucket)
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
		return nil, unlessUnreadable(err, "list the snapshots in bucket "+bucket)
	}
	var found []*csi.Snapshot
	for _, n := range names {
		if !strings.HasSuffix(n, "/") || n == volume.SnapshotBases {
			continue
		}
		snap, err := snapshotAt(ctx, a, volume.ID{S3: s, Bucket: bucket, Prefix: n})
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
// nil when there is none (or the credentials cannot read it).
func snapshotAt(ctx context.Context, a *s3store.Admin, id volume.ID) (*csi.Snapshot, error) {
	facts, err := recordOf{a: a, bucket: id.Bucket, prefix: id.Prefix}.read(ctx)
	if err != nil {
		return nil, unlessUnreadable(err, "read the record of snapshot "+id.String())
	}
	if facts[factSnapshot] == "" {
		return nil, nil
	}
	srcBucket, srcPrefix, _ := strings.Cut(facts[factSource], "/")
	created, _ := strconv.ParseInt(facts[factCreated], 10, 64)
	size, _ := strconv.ParseInt(facts[factSize], 10, 64)
	return &csi.Snapshot{
		SnapshotId:     id.String(),
		SourceVolumeId: volume.ID{S3: id.S3, Bucket: srcBucket, Prefix: srcPrefix}.String(),
		SizeBytes:      size,
		CreationTime:   timestamppb.New(time.Unix(created, 0)),
		ReadyToUse:     facts[factState] == stateReady,
	}, nil
}

// unlessUnreadable is nil for what a listing passes over: a bucket or
// record gone since it was listed, or one these credentials may not read
// (another tenant's); otherwise err's gRPC status.
func unlessUnreadable(err error, what string) error {
	switch {
	case err == nil, errors.Is(err, store.ErrNotExist), errors.Is(err, store.ErrNoBucket), errors.Is(err, store.ErrAccess):
		return nil
	}
	return s3Status(err, what)
}

// checkPage checks a List call's paging: no negative size, and a token
// this driver made (the id of the last entry returned).
func checkPage(maxEntries int32, token, call string) error {
	if maxEntries < 0 {
		return status.Error(codes.InvalidArgument, "max_entries may not be negative")
	}
	if token != "" {
		if _, err := volume.ParseID(token); err != nil {
			return status.Errorf(codes.Aborted, "starting token %q was not made by this driver's %s", token, call)
		}
	}
	return nil
}

// pageOf orders items by id and returns those after token, at most
// maxEntries of them (all when 0), and the token for the next page ("" at
// the end).
func pageOf[T any](items []T, id func(T) string, token string, maxEntries int32) ([]T, string) {
	sort.Slice(items, func(i, j int) bool { return id(items[i]) < id(items[j]) })
	if token != "" {
		items = items[sort.Search(len(items), func(i int) bool { return id(items[i]) > token }):]
	}
	if max := int(maxEntries); max > 0 && len(items) > max {
		items = items[:max]
		return items, id(items[max-1])
	}
	return items, ""
}

// keep is the items ok keeps.
func keep[T any](items []T, ok func(T) bool) []T {
	var out []T
	for _, it := range items {
		if ok(it) {
			out = append(out, it)
		}
	}
	return out
}
