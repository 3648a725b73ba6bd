package fusefs

import (
	"context"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// A training job's data loader, a build reading sources, Python's
// imports: each file is looked up by name and read at once, a HEAD and
// then a GET, two round trips for a file one GET could bring. When the
// files a directory's lookups find are opened for reading right after
// (at least half of them, over the last clusterWindow or two), its
// lookups by name peek instead: one ranged GET answers the lookup and
// brings the file's first peekBytes, kept under the version's ETag for
// the file's first READ: in memory (lookup_peek_bytes.go), or in the read
// cache when the memory limit has no room. A stat, ls or
// find opens nothing, and keeps its HEAD. Lookups that peek do not
// cluster (clustering): a listing would answer them without the bytes,
// and each read would still need its GET.

// peekBytes is what a peek brings of a file: the kernel's first READ of
// it (its readahead starts at 128 KiB), so that a small file is read
// whole without a request of its own.
const peekBytes = 128 << 10

// peekOpens is how many of the lookups that found a file must have been
// followed by its open for reading, out of peekOpensOf.
const peekOpens, peekOpensOf = 1, 2

// lookupReads counts a directory's lookups by name, the opens for
// reading that followed them and the files found longer than peekBytes,
// over the current clusterWindow and the one before it.
type lookupReads struct {
	since                           time.Time
	found, opened, long             int
	lastFound, lastOpened, lastLong int
}

// roll starts a new window when the current one is over. The counts of a
// window that ended more than a window ago are of no use.
func (r *lookupReads) roll(now time.Time) {
	if passed := now.Sub(r.since); passed > clusterWindow {
		r.lastFound, r.lastOpened, r.lastLong = r.found, r.opened, r.long
		if passed > 2*clusterWindow {
			r.lastFound, r.lastOpened, r.lastLong = 0, 0, 0
		}
		r.found, r.opened, r.long, r.since = 0, 0, 0, now
	}
}

// peeking says how lookups by name should peek now.
func (r *lookupReads) peeking(now time.Time) peekHow {
	r.roll(now)
	found, opened := r.found+r.lastFound, r.opened+r.lastOpened
	switch {
	case found < clusterLookups || opened*peekOpensOf < found*peekOpens:
		return noPeek
	case r.long+r.lastLong == 0:
		return peekWhole
	}
	return peekRange
}

// peekHow is how a lookup by name asks for the file it finds.
type peekHow int

const (
	// noPeek: a HEAD.
	noPeek peekHow = iota
	// peekRange: a GET of the first peekBytes.
	peekRange
	// peekWhole: a GET of the whole file, for a directory whose files
	// found lately all fit in peekBytes (a data set of small samples):
	// what a client reading them sends, which the server answers with
	// less work than a range. A longer file found so costs a dropped
	// connection, and sends the next lookups back to ranges.
	peekWhole
)

// peeks says how this directory's lookups by name peek now (see
// lookupReads), on a store that can and a mount with a read cache to keep
// the bytes.
func (n *dirNode) peeks() peekHow {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.peeksLocked()
}

// peeksLocked is peeks with n.mu held.
func (n *dirNode) peeksLocked() peekHow {
	if _, ok := n.fsys.store.(store.Peeker); !ok || n.fsys.cache == nil {
		return noPeek
	}
	return n.reads.peeking(time.Now())
}

// noteFound counts a lookup by name that found a file, which the file
// remembers until it is opened (noteOpened).
func (n *dirNode) noteFound(f *fileNode) {
	now := time.Now()
	f.mu.Lock()
	long := f.attr.size > peekBytes
	f.mu.Unlock()
	n.mu.Lock()
	n.reads.roll(now)
	n.reads.found++
	if long {
		n.reads.long++
	}
	n.mu.Unlock()
	f.mu.Lock()
	f.foundAt = now
	f.mu.Unlock()
}

// noteOpenedForReading counts the open of a file a lookup by name found
// within clusterWindow, in its directory.
func (f *fileNode) noteOpenedForReading() {
	f.mu.Lock()
	at := f.foundAt
	f.foundAt = time.Time{}
	f.mu.Unlock()
	if at.IsZero() || time.Since(at) > clusterWindow {
		return
	}
	_, p := f.Parent()
	if p == nil {
		return
	}
	if d, ok := p.Operations().(*dirNode); ok {
		d.mu.Lock()
		d.reads.roll(time.Now())
		d.reads.opened++
		d.mu.Unlock()
	}
}

// peekHead is a lookup's HEAD of key, as a peek unless how is noPeek and
// where the store can: its bytes wait for the file's first READ (peeked),
// or go to the read cache when the memory limit has no room for them.
func (f *FS) peekHead(ctx context.Context, key string, how peekHow) (store.Object, error) {
	p, ok := f.store.(store.Peeker)
	if how == noPeek || !ok || f.cache == nil {
		return f.store.Head(ctx, key)
	}
	buf := peekBuffers.Get().(*[]byte)
	o, n, err := p.Peek(ctx, key, *buf, how == peekWhole)
	if err != nil {
		peekBuffers.Put(buf)
		return o, err
	}
	f.stats.Peeks.Add(1)
	switch {
	case n == 0 || o.ETag == "":
	case f.peeked.keep(key, o.ETag, buf, n):
		return o, nil // buf is the peek's now
	default:
		// Under the version's ETag: never another version's bytes.
		f.cache.Store(key, o.ETag, o.Size, (*buf)[:n], 0)
	}
	peekBuffers.Put(buf)
	return o, nil
}
