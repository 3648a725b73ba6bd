package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
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
	body := func() io.Reader { return n.stagedBody(size) }
	if n.base == store.AnyVersion {
		return n.fsys.store.Put(ctx, key, body(), size, meta)
	}
	o, err := n.fsys.store.PutIfMatch(ctx, key, n.base, body(), size, meta)
	return n.keepApartLocked(ctx, key, size, meta, o, err)
}

// stagedBody reads the staging copy's first size bytes.
func (n *fileNode) stagedBody(size int64) io.Reader { return io.NewSectionReader(n.staging.f, 0, size) }

// keepApartLocked finishes a conditional upload of the staging copy that
// returned o and err: one refused (ErrChanged) because the object is no
// longer the version the copy was loaded from goes on from a version this
// mount made since, else the copy is kept under a conflict name.
func (n *fileNode) keepApartLocked(ctx context.Context, key string, size int64, meta map[string]string, o store.Object, err error) (store.Object, error) {
	body := func() io.Reader { return n.stagedBody(size) }
	if errors.Is(err, store.ErrChanged) {
		// The version there may be one this mount made since (a rename's
		// or a chmod's copy): the change goes on from it.
		if now, herr := n.fsys.store.Head(ctx, key); herr == nil && n.ownVersion(now.ETag) {
			n.base = now.ETag
			o, err = n.fsys.store.PutIfMatch(ctx, key, n.base, body(), size, meta)
		}
	}
	// A version deleted meanwhile (S3 answers If-Match on a missing key
	// with 404) is another writer's change too: the file is not
	// silently brought back.
	if !errors.Is(err, store.ErrChanged) && !errors.Is(err, store.ErrNotExist) {
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
	n.dropKernelCacheLater() // its pages and size are of the change kept
	return store.Object{}, cerr
}

// ownVersions are the ETags of the latest versions this mount made of a
// file: its uploads, and the copies its renames and metadata rewrites
// made (a copy's ETag may differ from its source's: a multipart source,
// or encryption). A lookup that finds one of them is not another
// writer's change, and an upload conditional on an older one may go on
// from it. Its lock is a leaf, held around nothing else, so that a
// rename holding the gate may note its copies.
type ownVersions struct {
	mu    sync.Mutex
	etags [8]string
	next  int
}

func (o *ownVersions) note(etag string) {
	if etag == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.etags[o.next] = etag
	o.next = (o.next + 1) % len(o.etags)
}

func (o *ownVersions) has(etag string) bool {
	if etag == "" {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.etags[:], etag)
}

// ownVersion reports whether etag is a version this mount made.
func (n *fileNode) ownVersion(etag string) bool { return n.own.has(etag) }
