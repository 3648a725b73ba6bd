package fusefs

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirStream is an open directory. Its entries reach the kernel as the
// listing's pages arrive, so the kernel (and ls, which stats what it has
// read) work on one page while the store prepares the next. A directory
// listed less than ListTTL ago is served from that listing.
type dirStream struct {
	n *dirNode

	mu      sync.Mutex
	started bool
	entries []fuse.DirEntry
	done    bool
	errno   syscall.Errno
	// changed is closed (and replaced) whenever entries grow or done is set.
	changed chan struct{}
	idx     int
	cancel  context.CancelFunc
	// lastCtx is the request that took the last entry.
	lastCtx context.Context
	// madeInodes counts the inodes READDIRPLUS made of entries of this
	// listing (see Lookup).
	madeInodes atomic.Int64
}

var (
	_ fs.FileReaddirenter = (*dirStream)(nil)
	_ fs.FileSeekdirer    = (*dirStream)(nil)
	_ fs.FileReleasedirer = (*dirStream)(nil)
)

func (n *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirStream{n: n, changed: make(chan struct{}), cancel: func() {}}, 0, 0
}

// start begins the listing on the first read of the directory, and the
// HEADs of listed files whose metadata the listing lacks. Hold s.mu.
func (s *dirStream) start() {
	if s.started {
		return
	}
	s.started = true
	// The listing and its HEADs outlive the READDIR request that started
	// them, and end with the open directory.
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.prefetchMetadata(ctx)
	n := s.n
	n.mu.Lock()
	if cached := n.freshListing(); cached != nil && cached.complete {
		entries := make([]dirEntry, 0, len(cached.entries))
		for _, e := range cached.entries {
			entries = append(entries, e)
		}
		n.mu.Unlock()
		slices.SortFunc(entries, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
		for _, e := range entries {
			s.entries = append(s.entries, n.direntOf(e))
		}
		s.entries = append(s.entries, unlisted(n.localEntries(), s.entries)...)
		s.done = true
		return
	}
	// Installed in the same critical section as the check above, so a
	// listing that just completed is never replaced by an empty one.
	l := newArrivingListing()
	n.listCache = l
	n.mu.Unlock()
	go s.list(ctx, l)
}

// prefetchMetadata sends the HEADs of the files the listing shows without
// metadata, in the order readers get them (see dir_listmeta.go).
func (s *dirStream) prefetchMetadata(ctx context.Context) {
	p := newMetaPrefetcher(s.n)
	for i := 0; ; i++ {
		ok, _ := s.waitFor(ctx, i)
		var name string
		if ok {
			name = s.entries[i].Name
		}
		s.mu.Unlock()
		if !ok || !p.fetch(ctx, name) {
			return
		}
	}
}

// list runs the listing, publishing each entry to readers and to the
// directory's listing cache l as it arrives.
func (s *dirStream) list(ctx context.Context, l *listing) {
	n := s.n
	// cache records e in l, unless this mount changed the name since the
	// listing began; it reports whether readers should see e.
	cache := func(e dirEntry) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		if l.changed[e.name] {
			_, exists := l.entries[e.name]
			return exists
		}
		if n.listCache == l {
			if len(l.entries) < n.fsys.cachedEntries {
				l.entries[e.name] = e
				l.at = time.Now()
			} else {
				n.listCache, n.relistable = nil, false // too large to keep
			}
		}
		return true
	}
	err := n.listEach(ctx, func(e dirEntry) {
		if cache(e) {
			s.publish(n.direntOf(e))
		}
	}, func(dir dirEntry) {
		// Readers already have the file: lookups get the directory.
		cache(dir)
		n.shadow(dir.name)
	})
	n.mu.Lock()
	if n.listCache == l {
		if err == nil {
			n.keepListing(l)
		} else {
			n.listCache = nil
		}
	}
	n.mu.Unlock()
	local := n.localEntries()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errno = errno(err)
	} else {
		s.entries = append(s.entries, unlisted(local, s.entries)...)
	}
	s.done = true
	s.signal()
}

func (s *dirStream) publish(e fuse.DirEntry) {
	s.mu.Lock()
	s.entries = append(s.entries, e)
	s.signal()
	s.mu.Unlock()
}

// signal wakes readers waiting for entries. Hold s.mu.
func (s *dirStream) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until entry i exists or the listing ended, and reports
// whether it exists. Returns with s.mu held.
func (s *dirStream) waitFor(ctx context.Context, i int) (bool, syscall.Errno) {
	s.mu.Lock()
	s.start()
	interrupted, gaveUp := ctx.Done(), (<-chan time.Time)(nil) // see patient
	for i >= len(s.entries) && !s.done {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-interrupted:
			interrupted, gaveUp = nil, time.After(time.Until(graceEnd(ctx, s.n.fsys.opts.waits.interruptGrace)))
		case <-gaveUp:
			s.mu.Lock()
			return false, syscall.EINTR
		}
		s.mu.Lock()
	}
	return i < len(s.entries), 0
}

// Readdirent is called by go-fuse for each entry of a READDIR(PLUS)
// request, with the same ctx throughout one request. Once a request holds
// an entry, it is answered with what has arrived rather than waiting for
// the next page: the kernel asks again, and an interrupt cannot land
// between entries (go-fuse would save it for the next request).
func (s *dirStream) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	s.mu.Lock()
	s.start()
	if ctx == s.lastCtx && s.idx >= len(s.entries) && !s.done {
		s.mu.Unlock()
		return nil, 0 // this request has entries: send them now
	}
	idx := s.idx
	s.mu.Unlock()
	ok, errno := s.waitFor(ctx, idx)
	defer s.mu.Unlock()
	if errno != 0 {
		return nil, errno
	}
	if !ok {
		return nil, s.errno // the end, or where the listing failed
	}
	e := s.entries[s.idx]
	s.idx++
	e.Off = uint64(s.idx)
	s.lastCtx = ctx
	return &e, 0
}

func (s *dirStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off > 0 {
		ok, errno := s.waitFor(ctx, int(off)-1)
		defer s.mu.Unlock()
		if errno != 0 {
			return errno
		}
		if !ok {
			return syscall.EINVAL
		}
	} else {
		s.mu.Lock()
		s.start()
		defer s.mu.Unlock()
	}
	s.idx = int(off)
	return 0
}

func (s *dirStream) Releasedir(ctx context.Context, releaseFlags uint32) {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	cancel()
}

// direntOf is the kernel's view of a listed child.
func (n *dirNode) direntOf(e dirEntry) fuse.DirEntry {
	mode := typeOf(e)
	if !e.isDir && e.obj.Metadata != nil {
		mode = n.fsys.attrsOf(e.obj, syscall.S_IFREG).mode & syscall.S_IFMT
	}
	return fuse.DirEntry{Name: e.name, Mode: mode}
}

// localEntries are files created here whose first upload has not happened
// yet, so that a listing may not show them.
func (n *dirNode) localEntries() []fuse.DirEntry {
	var out []fuse.DirEntry
	for name, ch := range n.Children() {
		if f, ok := ch.Operations().(*fileNode); ok && f.isLocal() {
			out = append(out, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
		}
	}
	return out
}

// unlisted are the entries of local that listed lacks. Local files are
// few, a listing may hold millions of names: the set is of the few.
func unlisted(local, listed []fuse.DirEntry) []fuse.DirEntry {
	if len(local) == 0 {
		return nil
	}
	missing := make(map[string]bool, len(local))
	for _, e := range local {
		missing[e.Name] = true
	}
	for _, e := range listed {
		delete(missing, e.Name)
	}
	var out []fuse.DirEntry
	for _, e := range local {
		if missing[e.Name] {
			out = append(out, e)
		}
	}
	return out
}
