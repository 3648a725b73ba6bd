package s3store

import (
	"context"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/tags"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Admin administers the buckets at one endpoint: what a CSI controller
// does to make and delete volumes (a bucket per volume, tagged, or a
// marker object per volume in a shared bucket). Every error it returns
// is explained as the store's are: a message naming what to check,
// wrapping a store error kind or one of the bucket administration errors
// (ErrBucketOwned, ErrBucketTaken, ErrTooManyBuckets, ErrBucketNotEmpty).
type Admin struct {
	c        *minio.Client
	endpoint string
}

// NewAdmin connects to cfg's endpoint.
func NewAdmin(cfg Config) (*Admin, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Admin{c: c, endpoint: cfg.Endpoint}, nil
}

// Endpoint is the endpoint Admin was made for.
func (a *Admin) Endpoint() string { return a.endpoint }

// Answers is nil when the endpoint gives any S3 answer, a refusal of the
// credentials included: it is there.
func (a *Admin) Answers(ctx context.Context) error {
	_, err := a.c.ListBuckets(ctx)
	if err == nil || minio.ToErrorResponse(err).Code != "" {
		return nil
	}
	return explain(err, a.endpoint, "")
}

// MakeBucket makes bucket in region.
func (a *Admin) MakeBucket(ctx context.Context, bucket, region string) error {
	return explain(a.c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: region}), a.endpoint, bucket)
}

// RemoveBucket removes bucket, which must be empty.
func (a *Admin) RemoveBucket(ctx context.Context, bucket string) error {
	return explain(a.c.RemoveBucket(ctx, bucket), a.endpoint, bucket)
}

// BucketExists reports whether bucket exists.
func (a *Admin) BucketExists(ctx context.Context, bucket string) (bool, error) {
	ok, err := a.c.BucketExists(ctx, bucket)
	return ok, explain(err, a.endpoint, bucket)
}

// Buckets lists the account's buckets by name.
func (a *Admin) Buckets(ctx context.Context) ([]string, error) {
	infos, err := a.c.ListBuckets(ctx)
	if err != nil {
		return nil, explain(err, a.endpoint, "")
	}
	names := make([]string, len(infos))
	for i, b := range infos {
		names[i] = b.Name
	}
	return names, nil
}

// BucketTags are bucket's tags; none (and no error) when it has none.
func (a *Admin) BucketTags(ctx context.Context, bucket string) (map[string]string, error) {
	t, err := a.c.GetBucketTagging(ctx, bucket)
	if minio.ToErrorResponse(err).Code == "NoSuchTagSet" {
		return nil, nil
	}
	if err != nil {
		return nil, explain(err, a.endpoint, bucket)
	}
	return t.ToMap(), nil
}

// SetBucketTags replaces bucket's tags with m.
func (a *Admin) SetBucketTags(ctx context.Context, bucket string, m map[string]string) error {
	t, err := tags.NewTags(m, false)
	if err != nil {
		return fmt.Errorf("tags of bucket %q: %v: %w", bucket, err, store.ErrInvalid)
	}
	return explain(a.c.SetBucketTagging(ctx, bucket, t), a.endpoint, bucket)
}

// BucketEmpty reports whether bucket holds no object.
func (a *Admin) BucketEmpty(ctx context.Context, bucket string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for o := range a.c.ListObjects(ctx, bucket, minio.ListObjectsOptions{MaxKeys: 1, Recursive: true}) {
		if o.Err != nil {
			return false, explain(o.Err, a.endpoint, bucket)
		}
		return false, nil
	}
	return true, nil
}

// Marker is the user metadata of the object key in bucket: a volume's
// marker in a shared bucket. store.ErrNotExist or ErrNoBucket when absent.
func (a *Admin) Marker(ctx context.Context, bucket, key string) (map[string]string, error) {
	info, err := a.c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if resp := minio.ToErrorResponse(err); resp.Code != "NoSuchBucket" && resp.StatusCode == 404 {
			return nil, fmt.Errorf("object %q in bucket %q: %w", key, bucket, store.ErrNotExist)
		}
		return nil, explain(err, a.endpoint, bucket)
	}
	return info.UserMetadata, nil
}

// PutMarker writes an empty object key in bucket with user metadata meta.
func (a *Admin) PutMarker(ctx context.Context, bucket, key string, meta map[string]string) error {
	_, err := a.c.PutObject(ctx, bucket, key, strings.NewReader(""), 0, minio.PutObjectOptions{UserMetadata: meta})
	return explain(err, a.endpoint, bucket)
}

// RemoveAll deletes every object under prefix in bucket, the prefix's
// own marker last: while it is there, the volume is.
func (a *Admin) RemoveAll(ctx context.Context, bucket, prefix string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	objects := make(chan minio.ObjectInfo)
	var listErr error
	go func() {
		defer close(objects)
		for o := range a.c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				listErr = o.Err
				return
			}
			if o.Key == prefix {
				continue
			}
			select {
			case objects <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	var removeErr error
	for r := range a.c.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		if r.Err != nil && minio.ToErrorResponse(r.Err).Code != "NoSuchKey" && removeErr == nil {
			removeErr = fmt.Errorf("remove %q: %w", r.ObjectName, explain(r.Err, a.endpoint, bucket))
			cancel() // the rest is not removed: the listing stops, the results drain
		}
	}
	if removeErr != nil {
		return removeErr
	}
	if listErr != nil {
		return explain(listErr, a.endpoint, bucket)
	}
	if prefix != "" {
		err := a.c.RemoveObject(ctx, bucket, prefix, minio.RemoveObjectOptions{})
		if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
			return explain(err, a.endpoint, bucket)
		}
	}
	return nil
}

// Children are the names directly under prefix in bucket (prefix itself
// left out): objects, and folders ending in "/"; with recursive, every
// key below it instead.
func (a *Admin) Children(ctx context.Context, bucket, prefix string, recursive bool) ([]string, error) {
	var names []string
	for o := range a.c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: recursive}) {
		if o.Err != nil {
			return nil, explain(o.Err, a.endpoint, bucket)
		}
		if o.Key != prefix {
			names = append(names, o.Key)
		}
	}
	return names, nil
}
