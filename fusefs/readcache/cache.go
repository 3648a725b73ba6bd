// Package readcache keeps byte ranges of S3 objects that were read at
// random in a local file, bounded in size, so that reading them again
// costs a pread instead of a ranged GET.
//
// Ranges are cached by the 4 KiB page. Pages go into one file in the
// order they arrive, whatever object and offset they hold, filling it 1
// MiB segment by segment: ranges read close in time lie close on disk,
// so reading them again in the same order (a program repeating its
// lookups, a scan run twice) is a sequential read of the file that the
// kernel's readahead serves in few disk reads. Kept at their objects'
// offsets in sparse files, the same pages would cost a disk read each
// once the page cache has dropped them. A segment is the unit of
// least-recently-used eviction, and an evicted segment is filled again,
// so the file never grows past the limit. A page is named by the
// object's key, ETag and size together, so an overwritten object is a
// miss, never stale bytes; no key names a file.
package readcache

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const (
	pageSize        = 4096
	blockSize       = 1 << 20 // a segment: the unit of eviction
	pagesPerSegment = blockSize / pageSize
)

// Stats are the cache's counters, exported as metrics.
type Stats struct {
	Hits, Misses atomic.Int64
	// Evictions counts 1 MiB segments dropped to stay within the limit.
	Evictions atomic.Int64
	// WriteErrors counts ranges that could not be written (a full disk):
	// the read they came from still succeeds.
	WriteErrors atomic.Int64
	// Bytes is the cache's size now, by the page (a gauge).
	Bytes atomic.Int64
}

// Cache is safe for concurrent use.
type Cache struct {
	dir   string
	limit int64
	stats Stats

	mu sync.Mutex
	f  *os.File // the segments, one after another
	// segments are those handed out so far, by their place in f; at
	// most limit / blockSize.
	segments []*segment
	lru      list.List // of *segment, most recently used first
	open     *segment  // the segment being filled; nil before the first
	objects  map[string]*object
	used     int64 // bytes of pages present
	// closed: the file is gone; reads and writes under way when Close
	// came finish as misses and change nothing.
	closed bool
}

// object is one object version's pages.
type object struct {
	id    string
	pages map[int64]slot // by page number
}

// slot is where in the file a page is: the file's page at, once written
// (ready).
type slot struct {
	at    int64
	ready bool
}

// segment is one 1 MiB range of the file and the pages it holds, in the
// order they were written.
type segment struct {
	index int64
	held  []heldPage
	// refs are reads and writes using the segment now; eviction leaves
	// such a segment alone, so its pages are never written over under
	// them.
	refs int
	elem *list.Element
}

// heldPage is what one slot of a segment holds: obj's page, or nothing
// (obj nil) when the write of it failed.
type heldPage struct {
	obj  *object
	page int64
}

// New makes a cache of at most limit bytes in a new directory inside dir,
// which Close removes. Nothing of an earlier cache is reused (its index
// was in memory); the directories of caches whose process is gone are
// removed, so that a crashing mounter does not fill its disk.
func New(dir string, limit int64) (*Cache, error) {
	if limit < blockSize {
		return nil, fmt.Errorf("read cache size %d is below the 1 MiB minimum", limit)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("read cache: %w", err)
	}
	liveMu.Lock()
	defer liveMu.Unlock()
	removeStale(dir)
	own, err := os.MkdirTemp(dir, fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("read cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(own, "pages"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		os.RemoveAll(own)
		return nil, fmt.Errorf("read cache: %w", err)
	}
	live[own] = true
	return &Cache{dir: own, limit: limit, f: f, objects: map[string]*object{}}, nil
}

const dirPrefix = "objfuse-read-cache-"

// live are this process's cache directories. A container restarted in
// its pod often gets the pid its crashed predecessor had, so "our pid"
// alone does not make a directory ours.
var (
	liveMu sync.Mutex
	live   = map[string]bool{}
)

// removeStale removes cache directories in dir whose process is gone, or
// that carry this process's pid but are not among its live caches.
func removeStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if (pid == os.Getpid() && !live[path]) || (pid != os.Getpid() && unix.Kill(pid, 0) == unix.ESRCH) {
			os.RemoveAll(path)
		}
	}
}

// Stats returns the live counters.
func (c *Cache) Stats() *Stats { return &c.stats }

// Dir is the directory the cache's files are in.
func (c *Cache) Dir() string { return c.dir }

// Close drops everything and removes the cache's directory.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.f.Close()
	c.objects = map[string]*object{}
	c.open = nil // the segments stay for the unhold of reads under way
	c.lru.Init()
	c.used = 0
	c.stats.Bytes.Store(0)
	liveMu.Lock()
	delete(live, c.dir)
	liveMu.Unlock()
	return os.RemoveAll(c.dir)
}

// id names an object version: its key, ETag and size (a caller that
// disagreed on the size with the one that stored it would read a short
// last page's stale tail).
func id(key, etag string, size int64) string {
	h := sha256.Sum256([]byte(key + "\x00" + etag + "\x00" + strconv.FormatInt(size, 10)))
	return hex.EncodeToString(h[:16])
}

// ReadAt fills p with the object's bytes at off when the cache holds all
// of them, and reports whether it did. size is the object's size.
func (c *Cache) ReadAt(key, etag string, size int64, p []byte, off int64) bool {
	end := off + int64(len(p))
	if len(p) == 0 || off < 0 || end > size {
		return false
	}
	k := id(key, etag, size)
	c.mu.Lock()
	o := c.objects[k]
	if c.closed {
		o = nil
	}
	var runs []run
	if o != nil {
		runs = o.runsOf(off/pageSize, (end-1)/pageSize)
	}
	if runs == nil {
		c.mu.Unlock()
		c.stats.Misses.Add(1)
		return false
	}
	c.hold(runs)
	c.mu.Unlock()

	ok := true
	for _, r := range runs {
		from, to := max(off, r.page*pageSize), min(end, (r.page+r.n)*pageSize)
		n, err := c.f.ReadAt(p[from-off:to-off], r.at*pageSize+from-r.page*pageSize)
		if err != nil || int64(n) != to-from {
			ok = false
			break
		}
	}

	c.mu.Lock()
	c.unhold(runs)
	c.mu.Unlock()
	if !ok {
		c.stats.Misses.Add(1)
		return false
	}
	c.stats.Hits.Add(1)
	return true
}

// run is n consecutive pages of an object, from page, in n consecutive
// pages of the file, from at.
type run struct {
	page, at, n int64
}

// runsOf returns where pages first..last are when every one is present,
// else nil.
func (o *object) runsOf(first, last int64) []run {
	var runs []run
	for pg := first; pg <= last; pg++ {
		s, ok := o.pages[pg]
		if !ok || !s.ready {
			return nil
		}
		runs = extend(runs, pg, s.at)
	}
	return runs
}

// extend adds page pg, at file page at, to runs: to the last run when it
// follows on in both, else as a run of its own.
func extend(runs []run, pg, at int64) []run {
	if k := len(runs) - 1; k >= 0 && runs[k].page+runs[k].n == pg && runs[k].at+runs[k].n == at {
		runs[k].n++
		return runs
	}
	return append(runs, run{page: pg, at: at, n: 1})
}

// hold and unhold count the runs' reads on their segments (a run may
// go on into the next one), and hold makes them the most recently used.
func (c *Cache) hold(runs []run) {
	for _, r := range runs {
		for i := r.at / pagesPerSegment; i <= (r.at+r.n-1)/pagesPerSegment; i++ {
			c.segments[i].refs++
			c.lru.MoveToFront(c.segments[i].elem)
		}
	}
}

func (c *Cache) unhold(runs []run) {
	for _, r := range runs {
		for i := r.at / pagesPerSegment; i <= (r.at+r.n-1)/pagesPerSegment; i++ {
			c.segments[i].refs--
		}
	}
}

// Store keeps p, the object's bytes at off, as far as they fill whole
// pages (or end the object). It is best effort: a failure only means a
// later read of the range goes to S3 again.
func (c *Cache) Store(key, etag string, size int64, p []byte, off int64) {
	end := off + int64(len(p))
	if off < 0 || end > size {
		return
	}
	first := (off + pageSize - 1) / pageSize // the first page that starts in p
	stop := end / pageSize                   // pages before stop end in p
	if end == size && end%pageSize != 0 && end/pageSize >= first {
		stop++ // the object's short last page
	}
	if stop <= first || (stop-first)*pageSize > c.limit/2 {
		return
	}

	k := id(key, etag, size)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	o := c.object(k)
	var runs []run
	var segs []*segment // held while their pages are written
	for pg := first; pg < stop; pg++ {
		if _, ok := o.pages[pg]; ok {
			continue // present, or being written by another Store
		}
		at, ok := c.nextSlot(o, pg)
		if !ok {
			break // every segment is in use: the rest is not kept
		}
		if sg := c.segments[at/pagesPerSegment]; len(segs) == 0 || segs[len(segs)-1] != sg {
			sg.refs++ // so that filling the next one cannot evict it
			segs = append(segs, sg)
		}
		o.pages[pg] = slot{at: at}
		runs = extend(runs, pg, at)
	}
	if len(o.pages) > 0 {
		// Starting a segment may have evicted o's last pages and
		// forgotten o, before any of its new ones was taken.
		c.objects[o.id] = o
	}
	c.mu.Unlock()

	failed := make([]bool, len(runs))
	anyFailed := false
	for i, r := range runs {
		from, to := r.page*pageSize, min((r.page+r.n)*pageSize, size)
		if _, err := c.f.WriteAt(p[from-off:to-off], r.at*pageSize); err != nil {
			failed[i], anyFailed = true, true
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sg := range segs {
		sg.refs--
	}
	if c.closed {
		return
	}
	if anyFailed {
		c.stats.WriteErrors.Add(1)
	}
	for i, r := range runs {
		for k := range r.n {
			pg, at := r.page+k, r.at+k
			if failed[i] {
				delete(o.pages, pg)
				c.segments[at/pagesPerSegment].held[at%pagesPerSegment] = heldPage{}
				continue
			}
			o.pages[pg] = slot{at: at, ready: true}
			c.used += pageSize
		}
	}
	c.forgetIfEmpty(o)
	c.stats.Bytes.Store(c.used)
}

// object returns the pages of the object version k names, none yet if
// it is new.
func (c *Cache) object(k string) *object {
	if o := c.objects[k]; o != nil {
		return o
	}
	o := &object{id: k, pages: map[int64]slot{}}
	c.objects[k] = o
	return o
}

// forgetIfEmpty drops an object version no page is kept of.
func (c *Cache) forgetIfEmpty(o *object) {
	if len(o.pages) == 0 && c.objects[o.id] == o {
		delete(c.objects, o.id)
	}
}

// nextSlot takes the next page of the segment being filled for obj's
// page pg, starting another segment when it is full: a new one while the
// file is below the limit, else the least recently used one no read or
// write is using, whose pages are dropped. It fails when every segment
// is in use.
func (c *Cache) nextSlot(obj *object, pg int64) (int64, bool) {
	if c.open == nil || len(c.open.held) == pagesPerSegment {
		sg := c.freeSegment()
		if sg == nil {
			return 0, false
		}
		c.open = sg
	}
	sg := c.open
	at := sg.index*pagesPerSegment + int64(len(sg.held))
	sg.held = append(sg.held, heldPage{obj: obj, page: pg})
	c.lru.MoveToFront(sg.elem)
	return at, true
}

// freeSegment returns an empty segment to fill, or nil.
func (c *Cache) freeSegment() *segment {
	if int64(len(c.segments)+1)*blockSize <= c.limit {
		sg := &segment{index: int64(len(c.segments)), held: make([]heldPage, 0, pagesPerSegment)}
		sg.elem = c.lru.PushFront(sg)
		c.segments = append(c.segments, sg)
		return sg
	}
	for e := c.lru.Back(); e != nil; e = e.Prev() {
		sg := e.Value.(*segment)
		if sg.refs > 0 {
			continue
		}
		c.evict(sg)
		return sg
	}
	return nil
}

// evict drops the pages a segment holds, so that it can be filled again.
func (c *Cache) evict(sg *segment) {
	dropped := 0
	for i, h := range sg.held {
		if h.obj == nil {
			continue
		}
		at := sg.index*pagesPerSegment + int64(i)
		if s, ok := h.obj.pages[h.page]; ok && s.at == at {
			delete(h.obj.pages, h.page)
			if s.ready {
				c.used -= pageSize
				dropped++
			}
			c.forgetIfEmpty(h.obj)
		}
	}
	sg.held = sg.held[:0]
	if dropped > 0 {
		c.stats.Evictions.Add(1)
	}
	c.stats.Bytes.Store(c.used)
}
