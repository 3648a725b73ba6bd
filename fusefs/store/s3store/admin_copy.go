package s3store

import (
	"context"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"
)

// Tree is every object under Prefix in Bucket: a volume, or a snapshot
// of one.
type Tree struct {
	Bucket, Prefix string
}

// CopyProgress is how far CopyTree has come.
type CopyProgress struct {
	Objects, Bytes int64
}

// Size sums the objects of t (the prefix's own marker left out).
func (a *Admin) Size(ctx context.Context, t Tree) (CopyProgress, error) {
	var total CopyProgress
	for o := range a.c.ListObjects(ctx, t.Bucket, minio.ListObjectsOptions{Prefix: t.Prefix, Recursive: true}) {
		if o.Err != nil {
			return total, explain(o.Err, a.endpoint, t.Bucket)
		}
		if o.Key == t.Prefix {
			continue
		}
		total.Objects++
		total.Bytes += o.Size
	}
	return total, nil
}

// CopyTree copies every object of src to dst, keys relative to their
// prefixes, server-side (CopyObject, or a multipart copy past 5 GiB), with
// the objects' metadata: no byte goes through this process. An object
// dst already holds in the same version (its ETag) is left as it is, so
// a copy cut short is finished by running it again. The prefix's own
// marker is not copied. done, when set, hears after each object.
func (a *Admin) CopyTree(ctx context.Context, src, dst Tree, done func(CopyProgress)) error {
	var p CopyProgress
	for o := range a.c.ListObjects(ctx, src.Bucket, minio.ListObjectsOptions{Prefix: src.Prefix, Recursive: true}) {
		if o.Err != nil {
			return explain(o.Err, a.endpoint, src.Bucket)
		}
		if o.Key == src.Prefix {
			continue
		}
		key := dst.Prefix + strings.TrimPrefix(o.Key, src.Prefix)
		have, err := a.c.StatObject(ctx, dst.Bucket, key, minio.StatObjectOptions{})
		if err != nil || have.ETag != o.ETag || have.Size != o.Size {
			if err := a.copyObject(ctx, src.Bucket, o.Key, dst.Bucket, key); err != nil {
				return err
			}
		}
		p.Objects++
		p.Bytes += o.Size
		if done != nil {
			done(p)
		}
	}
	return nil
}

// copyObject copies an object server-side: the version it holds now
// (one replaced since the listing is copied as it is now).
func (a *Admin) copyObject(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string) error {
	srcOpts := minio.CopySrcOptions{Bucket: srcBucket, Object: srcKey}
	dstOpts := minio.CopyDestOptions{Bucket: dstBucket, Object: dstKey}
	_, err := a.c.CopyObject(ctx, dstOpts, srcOpts)
	if err != nil && minio.ToErrorResponse(err).Code == "InvalidRequest" {
		// Objects over 5 GiB need a multipart copy (UploadPartCopy).
		_, err = a.c.ComposeObject(ctx, dstOpts, srcOpts)
	}
	if err != nil {
		return fmt.Errorf("copy %s/%s to %s/%s: %w", srcBucket, srcKey, dstBucket, dstKey, explain(err, a.endpoint, dstBucket))
	}
	return nil
}
