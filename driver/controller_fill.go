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
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/volume"
)

// fillWait is how long CreateVolume waits for a volume's copy before it
// answers Unavailable with the progress (csi-provisioner tries again and
// shows the message in the PVC's Events).
const fillWait = 20 * time.Second

// content is what a new volume is filled with: a snapshot's copy, or
// another volume (a clone).
type content struct {
	tree s3store.Tree
	what string // for messages
	size int64
}

// fill copies a volume's content into the new volume dst, server-side,
// and records on dst when it is whole; a repeated CreateVolume finds it
// whole, or the copy under way (started again after a controller
// restart).
func (c *controllerServer) fill(ctx context.Context, a *s3store.Admin, name string, dst volume.ID, from content) error {
	rec := recordOf{a: a, bucket: dst.Bucket, prefix: dst.Prefix}
	facts, err := rec.read(ctx)
	if err != nil {
		return s3Status(err, fmt.Sprintf("read volume %q", name))
	}
	if facts[factState] == stateReady {
		return nil
	}
	what := from.what
	job := c.copies.start("fill/"+name, func(ctx context.Context, j *copyJob) error {
		if err := copyTree(ctx, a, from.tree, s3store.Tree{Bucket: dst.Bucket, Prefix: dst.Prefix}, j); err != nil {
			return err
		}
		return rec.write(ctx, map[string]string{factState: stateReady, factSource: from.tree.Bucket + "/" + from.tree.Prefix})
	})
	if !job.waitBriefly(ctx, fillWait) {
		return status.Errorf(codes.Unavailable, "copying %s into volume %q: %s so far; still copying", what, name, job.progress())
	}
	if job.err != nil {
		return s3Status(job.err, fmt.Sprintf("copy %s into volume %q", what, name))
	}
	c.log.Info("volume filled", "volume", name, "from", what, "copied", job.progress())
	return nil
}

// contentOf finds what src names: a ready snapshot or an existing volume
// at endpoint (a server-side copy does not cross endpoints), and checks
// that it fits limit bytes (when above zero), before anything is made.
func (c *controllerServer) contentOf(ctx context.Context, a *s3store.Admin, endpoint string, src *csi.VolumeContentSource, limit int64) (content, error) {
	from, err := c.findContent(ctx, a, endpoint, src)
	if err != nil {
		return from, err
	}
	if limit > 0 && from.size > limit {
		return from, status.Errorf(codes.OutOfRange, "%s holds %d bytes, more than the %d bytes asked for: ask for at least that much", from.what, from.size, limit)
	}
	return from, nil
}

func (c *controllerServer) findContent(ctx context.Context, a *s3store.Admin, endpoint string, src *csi.VolumeContentSource) (content, error) {
	var id string
	var snapshot bool
	switch {
	case src.GetSnapshot() != nil:
		id, snapshot = src.GetSnapshot().GetSnapshotId(), true
	case src.GetVolume() != nil:
		id = src.GetVolume().GetVolumeId()
	default:
		return content{}, status.Error(codes.InvalidArgument, "volume content source names neither a snapshot nor a volume")
	}
	what := fmt.Sprintf("volume %q", id)
	if snapshot {
		what = fmt.Sprintf("snapshot %q", id)
	}
	from, err := volume.ParseID(id)
	if err != nil {
		return content{}, status.Errorf(codes.NotFound, "%s is not objfuse's: %v", what, err)
	}
	if from.S3.Endpoint != endpoint {
		return content{}, status.Errorf(codes.InvalidArgument, "%s is at %s and the new volume at %s: objfuse copies within one endpoint (give the StorageClass the same endpoint)", what, from.S3.Endpoint, endpoint)
	}
	c0 := content{tree: s3store.Tree{Bucket: from.Bucket, Prefix: from.Prefix}, what: what}
	if !snapshot {
		ok, err := volumeExists(ctx, a, from)
		if err != nil {
			return c0, s3Status(err, "look up "+what)
		}
		if !ok {
			return c0, status.Errorf(codes.NotFound, "%s does not exist", what)
		}
		size, err := a.Size(ctx, c0.tree)
		c0.size = size.Bytes
		return c0, s3Status(err, "size up "+what)
	}
	facts, err := recordOf{a: a, bucket: from.Bucket, prefix: from.Prefix}.read(ctx)
	switch {
	case errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrNoBucket):
		return c0, status.Errorf(codes.NotFound, "%s does not exist", what)
	case err != nil:
		return c0, s3Status(err, "look up "+what)
	case facts[factSnapshot] == "":
		return c0, status.Errorf(codes.NotFound, "%s is not a snapshot objfuse took", what)
	case facts[factState] != stateReady:
		return c0, status.Errorf(codes.Unavailable, "%s is still being copied: restore it once it is ready to use", what)
	}
	c0.size, _ = strconv.ParseInt(facts[factSize], 10, 64)
	return c0, nil
}
