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
//
// It holds a window of the listing, not all of it: a directory of a
// million names would otherwise keep them all while it is open. The
// listing waits while it is streamAhead entries past the reader, and
// entries more than streamBehind before the reader are dropped; a seek
// back before them lists the directory again from its start.
type dirStream struct {
	n *dirNode

	mu      sync.Mutex
	started bool
	// entries are the listing's entries from index base on; total is the
	// index of the next entry to arrive (entries before base that a
	// listing started again for a seek passes are not kept).
	entries     []fuse.DirEntry
	base, total int
	done        bool
	errno       syscall.Errno
	// changed is closed (and replaced) whenever entries grow, done is
	// set or the reader moves.
	changed chan struct{}
	idx     int
	// gen counts the listings started: a listing given up for a seek
	// back publishes nothing more.
	gen int
	// held: the listing waits for the reader to move (publish).
	held   bool
	cancel context.CancelFunc
	// lastCtx is the request that took the last entry.
	lastCtx context.Context
	// madeInodes counts the inodes READDIRPLUS made of entries of this
	// listing (see Lookup).
	madeInodes atomic.Int64
}

// The window an open directory keeps of its listing (see dirStream): a
// READDIRPLUS reply holds a few dozen entries, and the kernel asks again
// from the first one a reader's buffer had no room for, so a seek back of
// one reply stays inside it.
const (
	streamAhead  = 4096
	streamBehind = 1024
)

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
		listed := make([]fuse.DirEntry, 0, len(entries))
		for _, e := range entries {
			listed = append(listed, n.direntOf(e))
		}
		// A kept listing is small enough to hold whole.
		for _, e := range append(listed, unlisted(n.localEntries(), listed)...) {
			s.add(e)
		}
		s.done = true
		return
	}
	// Installed in the same critical section as the check above, so a
	// listing that just completed is never replaced by an empty one.
	l := newArrivingListing()
	n.listCache = l
	n.mu.Unlock()
	go s.list(ctx, l, s.gen)
}

// add records e, the listing's next entry, unless it lies before base
// (passed again after a seek back). Hold s.mu.
func (s *dirStream) add(e fuse.DirEntry) {
	if s.total >= s.base {
		s.entries = append(s.entries, e)
	}
	s.total++
}

// prefetchMetadata sends the HEADs of the files the listing shows without
// metadata, in the order readers get them (see dir_listmeta.go).
func (s *dirStream) prefetchMetadata(ctx context.Context) {
	p := newMetaPrefetcher(s.n)
	for i := 0; ctx.Err() == nil; i++ {
		ok, _ := s.waitFor(ctx, i)
		if ok && i < s.base {
			i = s.base - 1 // the reader passed it: on from the window
			s.mu.Unlock()
			continue
		}
		var name string
		if ok {
			name = s.entries[i-s.base].Name
		}
		s.mu.Unlock()
		if !ok || !p.fetch(ctx, name) {
			return
		}
	}
}

// list runs the listing, publishing each entry to readers and to the
// directory's listing cache l as it arrives. gen is the listing's
// generation (see dirStream.gen).
func (s *dirStream) list(ctx context.Context, l *listing, gen int) {
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
	// The files created here and not stored yet when the listing began
	// (a few), and which of them it showed: those it lacks and that are
	// still not stored are added at its end. (Files created since may be
	// left out, as POSIX allows.)
	local := map[string]bool{}
	for _, e := range n.localEntries() {
		local[e.Name] = false
	}
	err := n.listEach(ctx, func(e dirEntry) {
		if !cache(e) {
			return
		}
		if _, ok := local[e.name]; ok {
			local[e.name] = true
		}
		s.publish(ctx, gen, n.direntOf(e))
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
	var missing []fuse.DirEntry
	for _, e := range n.localEntries() {
		if listed, ok := local[e.Name]; ok && !listed {
			missing = append(missing, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return // given up for a seek back
	}
	if err != nil {
		s.errno = errno(err)
	} else {
		for _, e := range missing {
			s.add(e)
		}
	}
	s.done = true
	s.signal()
}

// publish hands e to readers, once they are less than streamAhead
// entries behind; a listing given up (gen is not the stream's) or ended
// (ctx) publishes nothing.
func (s *dirStream) publish(ctx context.Context, gen int, e fuse.DirEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for gen == s.gen && s.total-s.idx >= streamAhead {
		ch := s.changed
		s.held = true
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.held = false
		if ctx.Err() != nil {
			return
		}
	}
	if gen != s.gen {
		return
	}
	s.add(e)
	s.signal()
}

// signal wakes readers waiting for entries, and a listing waiting for
// the reader. Hold s.mu.
func (s *dirStream) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until entry i has arrived or the listing ended, and
// reports whether it arrived. Returns with s.mu held.
func (s *dirStream) waitFor(ctx context.Context, i int) (bool, syscall.Errno) {
	s.mu.Lock()
	s.start()
	interrupted, gaveUp := ctx.Done(), (<-chan time.Time)(nil) // see patient
	for i >= s.total && !s.done {
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
	return i < s.total, 0
}

// Readdirent is called by go-fuse for each entry of a READDIR(PLUS)
// request, with the same ctx throughout one request. Once a request holds
// an entry, it is answered with what has arrived rather than waiting for
// the next page: the kernel asks again, and an interrupt cannot land
// between entries (go-fuse would save it for the next request).
func (s *dirStream) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	s.mu.Lock()
	s.start()
	if ctx == s.lastCtx && s.idx >= s.total && !s.done {
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
	if s.idx != idx {
		return nil, 0 // a seek meanwhile: the kernel asks again
	}
	e := s.entries[idx-s.base]
	s.moveTo(idx + 1)
	e.Off = uint64(s.idx)
	s.lastCtx = ctx
	return &e, 0
}

// moveTo moves the reader to entry idx, within the window, dropping the
// entries it left more than streamBehind behind, and wakes a listing
// waiting for room. Hold s.mu.
func (s *dirStream) moveTo(idx int) {
	s.idx = idx
	if drop := min(idx-streamBehind-s.base, len(s.entries)); drop >= streamBehind {
		// Moved down in place, a window's worth every streamBehind
		// entries: the array stays the window's size.
		kept := copy(s.entries, s.entries[drop:])
		clear(s.entries[kept:])
		s.entries = s.entries[:kept]
		s.base += drop
	}
	if s.held {
		s.signal()
	}
}

func (s *dirStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	s.mu.Lock()
	switch {
	case int(off) < s.base:
		s.restartAt(int(off))
	case int(off) > s.total:
		// Past what has arrived: the window is kept from streamBehind
		// before off on, not from where it was.
		clear(s.entries)
		s.entries, s.base = s.entries[:0], max(s.total, int(off)-streamBehind)
	}
	s.start()
	s.moveTo(int(off))
	s.mu.Unlock()
	if off == 0 {
		return 0
	}
	ok, errno := s.waitFor(ctx, int(off)-1)
	s.mu.Unlock()
	if errno != 0 {
		return errno
	}
	if !ok {
		return syscall.EINVAL
	}
	return 0
}

// restartAt gives the listing up and starts it again (on the next read),
// keeping its entries from off on: the window holds none before base, and
// a directory can change between two listings, so this is as good as
// seekdir gets past it. Hold s.mu.
func (s *dirStream) restartAt(off int) {
	s.cancel()
	s.gen++
	s.started, s.done, s.errno = false, false, 0
	clear(s.entries)
	s.entries, s.base, s.total, s.idx = s.entries[:0], off, 0, off
	s.madeInodes.Store(0)
	s.signal()
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
