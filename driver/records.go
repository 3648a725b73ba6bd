package driver

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// What the driver records on what it makes, so that a repeated call
// recognises it and a later one (after a restart) knows where it stands:
// a bucket's tags ("objfuse.csi.io/<fact>"), or the user metadata of a
// prefix's marker object ("Objfuse-<Fact>"). CreateVolume writes a
// volume's name and size with their constants (controller_volumes.go),
// the same keys as factVolume and factCapacity.
const (
	factVolume   = "volume-name"
	factCapacity = "capacity"
	factSnapshot = "snapshot-name"
	factSource   = "source" // bucket/prefix of the volume a snapshot is of
	factState    = "state"  // stateCopying until the copy is whole, then stateReady
	factCreated  = "created"
	factSize     = "size"

	stateCopying = "copying"
	stateReady   = "ready"
)

// recordOf is where the facts of a bucket or prefix are kept.
type recordOf struct {
	a              *s3store.Admin
	bucket, prefix string
}

func factKey(prefix bool, fact string) string {
	if prefix {
		return http.CanonicalHeaderKey("objfuse-" + fact)
	}
	return "objfuse.csi.io/" + fact
}

// raw is the record as stored: tags, or the marker's metadata.
func (r recordOf) raw(ctx context.Context) (map[string]string, error) {
	if r.prefix == "" {
		return r.a.BucketTags(ctx, r.bucket)
	}
	return r.a.Marker(ctx, r.bucket, r.prefix)
}

// read returns the facts, by fact name.
func (r recordOf) read(ctx context.Context) (map[string]string, error) {
	raw, err := r.raw(ctx)
	if err != nil {
		return nil, err
	}
	facts := map[string]string{}
	for _, f := range []string{factVolume, factCapacity, factSnapshot, factSource, factState, factCreated, factSize} {
		if v, ok := raw[factKey(r.prefix != "", f)]; ok {
			facts[f] = v
		}
	}
	return facts, nil
}

// write sets facts, keeping the others the record holds.
func (r recordOf) write(ctx context.Context, facts map[string]string) error {
	raw, err := r.raw(ctx)
	if err != nil || raw == nil {
		raw = map[string]string{} // a new marker, or no tags yet
	}
	for f, v := range facts {
		raw[factKey(r.prefix != "", f)] = v
	}
	if r.prefix == "" {
		return r.a.SetBucketTags(ctx, r.bucket, raw)
	}
	return r.a.PutMarker(ctx, r.bucket, r.prefix, raw)
}

func unixNow() string { return strconv.FormatInt(time.Now().Unix(), 10) }
