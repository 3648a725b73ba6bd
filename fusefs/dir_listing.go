package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/objfuse/objfuse/fusefs/store"
)

// cachedEntriesFor bounds the names one directory's listing cache keeps,
// a quarter of the mount's memory budget at about 512 bytes a name (with
// objfuse-mount over MinIO, 100,000 names took 49 MB), and at least
// clusterLimit; larger directories are listed every time.
func cachedEntriesFor(memoryLimit int64) int {
	return max(clusterLimit, int(memoryLimit/4/512))
}

// dirEntry is one child found by listing a directory.
type dirEntry struct {
	name  string
	isDir bool
	// obj is the file, or the directory's marker object when the listing
	// showed one. obj.Metadata is nil when the listing did not carry
	// metadata (servers other than MinIO): then a lookup must HEAD,
	// or wait for fetch, the HEAD an open directory sent ahead of it.
	obj   store.Object
	fetch *metaFetch
}

// listing is a directory's cached listing. Lookups answer from it while it
// is fresh, including "no such file" once it is complete. A listing still
// arriving answers only for the names it has seen; its time moves on with
// every entry, so a long listing's first pages stay fresh until it ends.
type listing struct {
	entries  map[string]dirEntry
	at       time.Time
	complete bool
	// changed are names this mount created, changed or removed while the
	// listing was arriving: the store's older answer for them is ignored.
	changed map[string]bool
	// moved is closed, and replaced, when a name arrives while lookups
	// wait for theirs (waiters): a name found answers before the rest of
	// a long listing has come.
	moved   chan struct{}
	waiters int
	// clustered: lookups that clustered started it (see clustering).
	// slow: one waited clusterWait for it in vain; lookups answer from
	// it what it has brought and ask S3 for the rest.
	clustered, slow bool
}

// newArrivingListing is a listing about to be filled from the store.
// Names this mount changes meanwhile are marked in changed (noteChild),
// and the store's older answer for them is ignored.
func newArrivingListing() *listing {
	return &listing{entries: map[string]dirEntry{}, at: time.Now(), changed: map[string]bool{}, moved: make(chan struct{})}
}

// completed marks an arriving listing as the store's whole answer, fresh
// from now: a listing that took longer than ListTTL still answers the
// lookups that waited for it.
func (l *listing) completed() {
	l.complete, l.at, l.changed = true, time.Now(), nil
}

// keepListing installs l, complete, as the directory's listing until it
// expires, and drops it then: an expired listing answers nothing, and a
// large directory's would otherwise hold every name, size and metadata
// map (about 600 bytes a name) for as long as the kernel keeps the
// directory, in a mounter whose memory is limited. What relist needs
// later, whether the directory was small, stays in relistable. Hold n.mu.
func (n *dirNode) keepListing(l *listing) {
	l.completed()
	n.listCache = l
	n.relistable = len(l.entries) <= relistLimit
	n.dropWhenExpired(l, n.fsys.opts.ListTTL)
}

// dropWhenExpired drops l after d, or later if it is still fresh then,
// unless it was replaced meanwhile.
func (n *dirNode) dropWhenExpired(l *listing, d time.Duration) {
	time.AfterFunc(d, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.listCache != l {
			return
		}
		if left := n.fsys.opts.ListTTL - time.Since(l.at); left >= 0 {
			n.dropWhenExpired(l, left+time.Millisecond)
			return
		}
		n.listCache = nil
	})
}

// listEach reads the directory from the store and calls emit with each
// child as it arrives. A file and a directory with the same name are the
// directory (see FS.resolve). Stores may yield a page's objects before its
// prefixes (minio-go does), so a file can come before the directory that
// hides it; then shadowed is called with the directory.
func (n *dirNode) listEach(ctx context.Context, emit, shadowed func(dirEntry)) error {
	dirKey := n.key()
	var files fileWatch
	lastDir := ""
	for e, err := range n.fsys.store.List(ctx, dirKey, "", false) {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err() // stopped: not every store notices between pages
		}
		name, isPrefix := childName(dirKey, e.Name())
		if name == "" && !isPrefix {
			continue // the directory's own marker
		}
		if !validName(name) {
			n.fsys.stats.HiddenKeys.Add(1)
			continue
		}
		n.noteShown()
		files.pass(e.Name()[len(dirKey):])
		switch {
		case isPrefix && name == lastDir:
			continue // a server that repeats a prefix on the next page
		case isPrefix && files.listed(name):
			lastDir = name
			n.fsys.stats.HiddenKeys.Add(1)
			shadowed(dirEntry{name: name, isDir: true})
		case isPrefix:
			lastDir = name
			emit(dirEntry{name: name, isDir: true})
		default:
			files.add(name)
			emit(dirEntry{name: name, obj: e.Object})
		}
	}
	// A listing stopped between pages ends without an error: it must not
	// pass for a complete one.
	return ctx.Err()
}

// listPageKeys is the most keys one page of a listing holds (S3's
// MaxKeys, objects and prefixes together), four times over: a server
// that counts a page's keys otherwise costs a few kilobytes more.
const listPageKeys = 4 * 1000

// fileWatch keeps the names of the files a listing has yielded while a
// directory of the same name may still follow, so that listEach can tell
// it is shadowed: only those, not every name of a directory of millions.
// Keys come in order, so directory N ("N/") comes after file N and
// before any key past "N/" of the next page; minio-go yields a page's
// objects before its prefixes, so a key past "N/" may come first, but
// never more than a page's keys before "N/". A file is forgotten once
// listPageKeys keys have come after the first key past its directory's.
type fileWatch struct {
	names map[string]bool
	// queue holds names' files in listing order (which is key order);
	// passed of queue[:marked] is the count of keys at the first key
	// past the file's directory.
	queue  []watchedFile
	marked int
	keys   int
}

type watchedFile struct {
	name   string
	passed int
}

// pass counts key, relative to the directory, and forgets the files
// whose directory can no longer come.
func (w *fileWatch) pass(key string) {
	w.keys++
	for w.marked < len(w.queue) && w.queue[w.marked].name+"/" < key {
		w.queue[w.marked].passed = w.keys
		w.marked++
	}
	for w.marked > 0 && w.keys-w.queue[0].passed > listPageKeys {
		delete(w.names, w.queue[0].name)
		w.queue = w.queue[1:]
		w.marked--
	}
}

func (w *fileWatch) add(name string) {
	if w.names == nil {
		w.names = map[string]bool{}
	}
	w.names[name] = true
	w.queue = append(w.queue, watchedFile{name: name})
}

// listed reports whether a file named name was listed (and is
// forgotten now: a directory's name comes once).
func (w *fileWatch) listed(name string) bool {
	if !w.names[name] {
		return false
	}
	delete(w.names, name)
	return true
}

// cached answers a lookup from a fresh listing: the entry, or
// found=false with ENOENT-worthy certainty when known=true. A listed
// object whose metadata is unknown is found but not known (see
// listedEntry).
func (n *dirNode) cached(name string) (e dirEntry, found, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.freshListing().answer(name)
}

// answerFrom answers a lookup from l, a listing relist waited for, as
// cached does from a fresh one.
func (n *dirNode) answerFrom(l *listing, name string) (e dirEntry, found, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return l.answer(name)
}

// answer is what l says of name (see cached); a nil listing says
// nothing. Hold the directory's mu.
func (l *listing) answer(name string) (e dirEntry, found, known bool) {
	if l == nil {
		return dirEntry{}, false, false
	}
	e, found = l.entries[name]
	if !found && !l.complete {
		return dirEntry{}, false, false
	}
	if found && metadataUnknown(e) {
		return e, true, false
	}
	return e, found, true
}

// freshListing is the cached listing if it is still fresh. Hold n.mu.
func (n *dirNode) freshListing() *listing {
	l := n.listCache
	if l == nil || time.Since(l.at) > n.fsys.opts.ListTTL {
		return nil
	}
	return l
}

// relistLimit bounds the directories that relist serves: one listing page.
const relistLimit = 1000

// relistTimeout bounds one relisting, which no lookup's interrupt stops.
const relistTimeout = time.Minute

// Lookups cluster in a directory when clusterLookups of them ask the store
// by name within clusterWindow: a find, an rsync, Python's imports or git
// status looking at many siblings. The next then lists the directory, up
// to clusterLimit names (twenty listing pages, about 12 MB of entries),
// and it and the lookups after it wait for the listing to bring their
// names: for a thousand files of a directory of ten thousand, ten LISTs
// instead of a thousand HEADs. Waiting is what makes the listing pay:
// lookups that asked by name beside it each still cost a HEAD until it
// passed their names, about a thousand of the thousand in the harness.
// What it costs is time where the lookups are a small part of a large
// directory: a cold MinIO lists ten thousand names with their metadata
// in about the time of two thousand HEADs (2.0 ms a lookup on average
// for the harness's thousand, against 1.6 with HEADs beside the listing;
// the median lookup, answered from the listing, 40 µs against 1.3 ms).
// A few lookups then waiting for a large directory wait for their
// names' pages, at most clusterLimit names in. An isolated lookup still
// costs one HEAD. Lookups that find nothing (a program creating files)
// do not count, and stores whose listings carry no metadata are not
// listed so (each file would still need its HEAD).
const (
	clusterLookups = 3
	clusterWindow  = time.Second
	clusterLimit   = 20 * relistLimit
	// clusterWait bounds a lookup's wait for a clustered listing, twice
	// what a cold MinIO takes for clusterLimit names: a server that
	// lists more slowly than that costs one lookup this wait, and the
	// lookups after it ask by name beside the listing.
	clusterWait = 8 * time.Second
	// clusterBackoff is how long lookups in a directory do not cluster
	// after a clustered listing there failed: each time they did, the
	// lookups would wait for it again.
	clusterBackoff = time.Minute
)

// clustering says whether lookups cluster in the directory now (see
// clusterLookups). Hold n.mu.
func (n *dirNode) clustering() bool {
	return !n.unclusterable && !n.fsys.listingsLackMetadata.Load() && n.byName >= clusterLookups && time.Since(n.byNameSince) <= clusterWindow && n.peeksLocked() == noPeek && time.Now().After(n.clusterAgain)
}

// relist lists the directory again when its complete listing has expired
// and held at most relistLimit names, so that the lookups of the next
// ListTTL answer from it, "no such file" included. Creating many files in
// one directory is the case it is for: each create looks its name up
// first, and asking the store per name costs a HEAD and a LIST each, where
// this is one LIST per ListTTL. It lists a directory of any size, up to
// the FS's clusterLimit names, when lookups cluster in it (clustering).
// Concurrent callers share one listing. It returns the listing the caller
// is to answer from for name: the one it waited for once that holds name
// or is complete, even if it has expired by the time the caller runs again
// (it began after the listing the caller missed in had expired: as good
// an answer as one the caller had waited for while fresh), or one another
// caller's relist left fresh meanwhile. Nil sends the caller to the store
// by name.
func (n *dirNode) relist(ctx context.Context, name string) *listing {
	n.mu.Lock()
	done, l := n.relisting, n.relisted
	if done == nil {
		if c := n.listCache; c != nil && c.complete && len(c.entries) > relistLimit {
			n.relistable = false // grown past a page by this mount's creates
		}
		if fresh := n.freshListing(); fresh != nil && fresh.complete {
			n.mu.Unlock()
			return fresh // another lookup's relist ended since ours missed
		}
		arriving := n.listCache != nil && !n.listCache.complete
		clustered := !n.relistable && n.clustering()
		if (!n.relistable && !clustered) || arriving {
			n.mu.Unlock()
			return nil
		}
		done = make(chan struct{})
		l = newArrivingListing()
		l.clustered = clustered
		n.relisting, n.relisted, n.listCache = done, l, l
		go n.runRelist(l, done, clustered)
	}
	defer n.mu.Unlock() // every return below holds n.mu
	l.waiters++
	defer func() { l.waiters-- }() // before the unlock (deferred calls run last first)
	var waited <-chan time.Time
	if l.clustered {
		t := time.NewTimer(time.Duration(n.fsys.clusterWait.Load()))
		defer t.Stop()
		waited = t.C
	}
	for {
		if _, found := l.entries[name]; found || l.complete {
			return l
		}
		if l.slow {
			return nil
		}
		moved := l.moved
		n.mu.Unlock()
		select {
		case <-done:
			n.mu.Lock()
			if !l.complete {
				return nil // stopped, failed, or replaced by a READDIR's listing
			}
		case <-moved:
			n.mu.Lock()
		case <-waited:
			n.mu.Lock()
			l.slow = true
		case <-ctx.Done():
			n.mu.Lock()
			return nil
		}
	}
}

// runRelist fills l from the store, up to relistLimit names (the FS's
// clusterLimit when lookups cluster), and closes done. It is not tied to
// the lookup that started it: that lookup's interrupt must not cost the
// others their answer, nor the directory its relisting.
func (n *dirNode) runRelist(l *listing, done chan struct{}, clustered bool) {
	ctx, cancel := context.WithTimeout(context.Background(), relistTimeout)
	defer cancel()
	limit := relistLimit
	if clustered {
		limit = n.fsys.clusterLimit
	}
	seen, tooMany := 0, false
	cache := func(e dirEntry) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.listCache != l {
			cancel() // a READDIR's listing replaced it
			return
		}
		if seen++; seen > limit {
			// Another client filled the directory: listing it whole
			// inside a lookup would take a LIST page per thousand names.
			tooMany = true
			cancel()
			return
		}
		if clustered && !e.isDir && metadataUnknown(e) {
			// The store lists without metadata (AWS S3 and most but
			// MinIO): each file would still need a HEAD, and the
			// listing would only make lookups wait.
			n.fsys.listingsLackMetadata.Store(true)
			cancel()
			return
		}
		if !l.changed[e.name] {
			l.entries[e.name] = e
		}
		if l.waiters > 0 {
			close(l.moved)
			l.moved = make(chan struct{})
		}
	}
	err := n.listEach(ctx, cache, func(dir dirEntry) {
		cache(dir)
		n.shadow(dir.name)
	})
	n.mu.Lock()
	if n.listCache == l {
		switch {
		case tooMany:
			// Large now: lookups ask the store by name.
			n.listCache, n.relistable = nil, false
			n.unclusterable = n.unclusterable || clustered
		case err != nil:
			n.listCache = nil // the next miss tries again
			n.byName = 0      // a clustered one only after more lookups
			if clustered {
				n.clusterAgain = time.Now().Add(clusterBackoff)
			}
		default:
			n.keepListing(l)
			n.byName = 0
		}
	}
	n.relisting, n.relisted = nil, nil
	n.mu.Unlock()
	close(done)
}

// remember caches entries as the directory's complete listing.
func (n *dirNode) remember(entries []dirEntry) {
	l := &listing{entries: make(map[string]dirEntry, len(entries))}
	for _, e := range entries {
		l.entries[e.name] = e
	}
	n.mu.Lock()
	n.keepListing(l)
	n.mu.Unlock()
}

// noteChild records a change this mount made, so that a cached listing
// stays true. e == nil removes the name.
func (n *dirNode) noteChild(name string, e *dirEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listCache == nil {
		return
	}
	if !n.listCache.complete {
		n.listCache.changed[name] = true
	}
	if e == nil {
		delete(n.listCache.entries, name)
	} else {
		n.listCache.entries[name] = *e
	}
}

// noteInParent records a node's new attributes (an object written
// anew) in its parent's listing, so that a lookup answered from that
// listing does not bring the old ones back.
func noteInParent(in *fs.Inode, e dirEntry) {
	name, p := in.Parent()
	if p == nil {
		return
	}
	if d, ok := p.Operations().(*dirNode); ok {
		e.name = name
		d.noteChild(name, &e)
	}
}

// forget drops the cached listing.
func (n *dirNode) forget() {
	n.mu.Lock()
	n.listCache, n.relistable = nil, false
	n.mu.Unlock()
}

func typeOf(e dirEntry) uint32 {
	if e.isDir {
		return syscall.S_IFDIR
	}
	return syscall.S_IFREG
}

// shadow records that name is a directory hiding a file of the same name,
// and makes the kernel forget the file it was told about.
func (n *dirNode) shadow(name string) {
	n.mu.Lock()
	if n.shadowed == nil {
		n.shadowed = map[string]bool{}
	}
	n.shadowed[name] = true
	n.mu.Unlock()
	// Not inline: the kernel may hold the directory's lock for a READDIR
	// that waits for the very listing that found the directory.
	go n.NotifyEntry(name)
}

func (n *dirNode) isShadowed(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shadowed[name]
}
