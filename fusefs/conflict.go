package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// A change made here to an existing object (a write in place, an append,
// a truncate to a non-zero size) is a read-modify-write of the version
// it was loaded from (fileNode.base). Should another writer (another
// mount, another S3 client) have stored a newer version meanwhile, the
// upload is refused rather than overwrite it: the content made here is
// kept beside it under a conflict name, the writer's close or fsync
// fails, and the mount's Health names the file.

// conflictSuffix starts the name a conflicting change is kept under:
// "<name>.objfuse-conflict-<UTC time>".
const conflictSuffix = ".objfuse-conflict-"

// conflictName is the key a change to key that lost to another writer's
// is kept under.
func conflictName(key string, at time.Time) string {
	return key + conflictSuffix + at.UTC().Format("20060102T150405.000000000Z")
}

// errConflict: another writer replaced the object this change was made
// to; the change is kept under a conflict name.
var errConflict = errors.New("another writer replaced the file since it was read: this change was not stored under its name")

// uploadStaging stores the staging copy's size bytes as key: on the
// condition that the object is still the version they were loaded from,
// unless they replace it whole.
func (n *fileNode) uploadStaging(ctx context.Context, key string, size int64, meta map[string]string) (store.Object, error) {
	body := func() io.Reader { return io.NewSectionReader(n.staging.f, 0, size) }
	if n.base == store.AnyVersion {
		return n.fsys.store.Put(ctx, key, body(), size, meta)
	}
	o, err := n.fsys.store.PutIfMatch(ctx, key, n.base, body(), size, meta)
	if !errors.Is(err, store.ErrChanged) {
		return o, err
	}
	kept := conflictName(key, time.Now())
	if _, kerr := n.fsys.store.Put(ctx, kept, body(), size, meta); kerr != nil {
		return store.Object{}, fmt.Errorf("%q: %w; keeping the change as %q failed too: %w", key, errConflict, kept, kerr)
	}
	cerr := fmt.Errorf("%q: %w; it is kept as %q", key, errConflict, kept)
	n.fsys.noteConflict(cerr)
	// The change is stored, under another name: the file here becomes
	// the other writer's version at the next lookup.
	n.dropLocal()
	n.attrAt = time.Time{}
	return store.Object{}, cerr
}
