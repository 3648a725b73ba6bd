package fusefs

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/objfuse/objfuse/fusefs/store"
)

// A listing shows a directory as a prefix, so the mode, owner and mtime
// its marker keeps are unknown until a HEAD; so are a file's everywhere
// but MinIO, the only server that lists objects with their metadata.
// READDIRPLUS looks entries up one after another: a HEAD each, in turn,
// made `ls -l` of 1,000 files on such a server 1,000 round trips end to
// end (14 s with 10 ms round trips). An open directory instead sends
// those HEADs ahead of the reader, several at once, and each lookup waits
// for its own.

const (
	// metaFetchers is how many HEADs one open directory has in flight.
	metaFetchers = 32
	// metaLookahead bounds the HEADs sent and not yet asked for by a
	// lookup: a reader that stops early (`ls | head`) costs at most this
	// many more.
	metaLookahead = 256
)

// metaFetch is the HEAD of one listed entry whose attributes the listing
// did not carry: of a file, or of a directory's marker (404: it has
// none). It stays with the listing's entry, which is fresh exactly as
// long as what the HEAD says.
type metaFetch struct {
	key   string
	isDir bool
	done  chan struct{}
	obj   store.Object
	err   error
	// used is set by the first lookup that asks for the result; by is the
	// prefetcher that sent it, which may send one more then.
	used atomic.Bool
	by   *metaPrefetcher
}

// await waits for the HEAD and returns the object it found.
func (f *metaFetch) await(ctx context.Context) (store.Object, error) {
	if f.by != nil && !f.used.Swap(true) {
		f.by.asked()
	}
	select {
	case <-f.done:
		return f.obj, f.err
	case <-ctx.Done():
		return store.Object{}, ctx.Err()
	}
}

// metaPrefetcher sends an open directory's HEADs, in listing order (the
// order READDIRPLUS looks entries up in).
type metaPrefetcher struct {
	n     *dirNode
	slots chan struct{}
	// sent and used count the HEADs sent and those a lookup asked for;
	// sent-used stays within metaLookahead.
	sent, used atomic.Int64
	wake       chan struct{}
}

func newMetaPrefetcher(n *dirNode) *metaPrefetcher {
	return &metaPrefetcher{n: n, slots: make(chan struct{}, metaFetchers), wake: make(chan struct{}, 1)}
}

func (p *metaPrefetcher) asked() {
	p.used.Add(1)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fetch sends the HEAD of name if its listing entry needs one, waiting
// first for room in the lookahead and for a free slot. It returns false
// when ctx ends.
func (p *metaPrefetcher) fetch(ctx context.Context, name string) bool {
	for stalled := false; p.sent.Load()-p.used.Load() >= metaLookahead; stalled = true {
		if !stalled {
			p.n.fsys.prefetchStalls.Add(1)
		}
		select {
		case <-p.wake:
		case <-ctx.Done():
			return false
		}
	}
	f, isNew := p.n.attachFetch(name, p)
	if !isNew {
		return true
	}
	p.sent.Add(1)
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		f.err = ctx.Err()
		p.n.fetched(name, f)
		return false
	}
	go func() {
		defer func() { <-p.slots }()
		p.n.runFetch(ctx, name, f)
	}()
	return true
}

// attachFetch returns the fetch of name's entry in the directory's
// listing when the entry's attributes are unknown: the one attached
// already, or a new one (isNew) for the caller to run. by is the
// prefetcher running it, or nil for a lookup.
func (n *dirNode) attachFetch(name string, by *metaPrefetcher) (f *metaFetch, isNew bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.listCache
	if l == nil {
		return nil, false
	}
	e, ok := l.entries[name]
	if !ok || !metadataUnknown(e) {
		return nil, false
	}
	if e.fetch != nil {
		return e.fetch, false
	}
	key := e.obj.Key
	if e.isDir {
		key = n.key() + name + "/" // its marker, if it has one
	}
	e.fetch = &metaFetch{key: key, isDir: e.isDir, done: make(chan struct{}), by: by}
	l.entries[name] = e
	return e.fetch, true
}

// metadataUnknown reports a listed entry whose attributes the listing
// did not carry: a file listed without metadata, or any directory, which
// a listing shows as a prefix, without its marker (mode, owner, mtime).
func metadataUnknown(e dirEntry) bool {
	return e.obj.Metadata == nil
}

// listedEntry completes a lookup of a listed entry whose metadata is
// unknown: with the HEAD an open directory sent ahead of it, or with one
// sent now, which neither the directory's prefetcher nor another lookup
// repeats. ok=false sends the lookup to the store by name.
func (n *dirNode) listedEntry(ctx context.Context, listed dirEntry) (e dirEntry, ok bool) {
	name, f := listed.name, listed.fetch
	if f == nil {
		var isNew bool
		if f, isNew = n.attachFetch(name, nil); f == nil {
			return dirEntry{}, false
		}
		if isNew {
			n.runFetch(ctx, name, f)
		}
	}
	obj, err := f.await(ctx)
	if err != nil {
		return dirEntry{}, false
	}
	return dirEntry{name: name, isDir: listed.isDir, obj: obj}, true
}

// runFetch sends f's HEAD and publishes its result.
func (n *dirNode) runFetch(ctx context.Context, name string, f *metaFetch) {
	f.obj, f.err = n.fsys.store.Head(ctx, f.key)
	if f.isDir && errors.Is(f.err, store.ErrNotExist) {
		f.obj, f.err = store.Object{}, nil // no marker: the defaults
	}
	if f.err == nil && f.obj.Metadata == nil {
		f.obj.Metadata = map[string]string{} // asked: it has none
	}
	n.fetched(name, f)
}

// fetched publishes f's result. A failed fetch leaves the entry, so that
// a later reader of the directory tries again; its waiting lookups ask
// the store by name.
func (n *dirNode) fetched(name string, f *metaFetch) {
	if f.err != nil {
		n.mu.Lock()
		if l := n.listCache; l != nil {
			if e, ok := l.entries[name]; ok && e.fetch == f {
				e.fetch = nil
				l.entries[name] = e
			}
		}
		n.mu.Unlock()
	}
	close(f.done)
}
