package serve

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/volume"
)

// recordedCapacity reads the volume's size where CreateVolume and
// ControllerExpandVolume record it (a tag on the bucket, metadata on the
// prefix's marker), so that a mounter started before an expansion, on a
// node where kubelet did not call NodeExpandVolume, still takes it.
func (c Config) recordedCapacity(st *s3store.Store) func(context.Context) (int64, error) {
	var admin *s3store.Admin
	return func(ctx context.Context) (int64, error) {
		var v string
		if c.Prefix != "" {
			o, err := st.Head(ctx, c.Prefix)
			if err != nil {
				return 0, fmt.Errorf("read the volume's marker %q: %w", c.Prefix, err)
			}
			v = o.Metadata[strings.ToLower(volume.MetaCapacity)]
		} else {
			if admin == nil {
				a, err := s3store.NewAdmin(c.S3)
				if err != nil {
					return 0, err
				}
				admin = a
			}
			tags, err := admin.BucketTags(ctx, c.Bucket)
			if err != nil {
				return 0, fmt.Errorf("read the tags of bucket %q: %w", c.Bucket, err)
			}
			v = tags[volume.TagCapacity]
		}
		if v == "" {
			return 0, nil // nothing recorded (a static volume): keep the mount's
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("the recorded capacity %q is not a size in bytes", v)
		}
		return n, nil
	}
}
