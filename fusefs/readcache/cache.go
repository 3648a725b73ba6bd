// Package readcache keeps byte ranges of S3 objects that were read at
// random in local files, bounded in total size, so that reading them
// again costs a pread instead of a ranged GET.
//
// Ranges are cached by the 4 KiB page, in blocks of 1 MiB: a block is the
// unit of least-recently-used eviction, which punches its range out of the
// object's sparse file. A cached range is named by the object's key and
// ETag together, so an overwritten object is a miss, never stale bytes.
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
	pageSize      = 4096
	blockSize     = 1 << 20
	pagesPerBlock = blockSize / pageSize
)

// Stats are the cache's counters, exported as metrics.
type Stats struct {
	Hits, Misses atomic.Int64
	// Evictions counts blocks dropped to stay within the limit.
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

	mu      sync.Mutex
	objects map[string]*object // by id(key, etag)
	lru     list.List          // of *block, most recently used first
	used    int64              // bytes of present pages
}

// object is one object version's sparse file.
type object struct {
	id     string
	f      *os.File
	blocks map[int64]*block
}

// block is one 1 MiB range of an object's file and the pages of it that
// hold the object's bytes.
type block struct {
	obj   *object
	index int64
	pages [pagesPerBlock / 64]uint64
	count int // pages present
	// refs are reads and writes using the block's range now; eviction
	// leaves such a block alone, so a hole is never punched under them.
	refs int
	elem *list.Element
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
	live[own] = true
	return &Cache{dir: own, limit: limit, objects: map[string]*object{}}, nil
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
	for _, o := range c.objects {
		o.f.Close()
	}
	c.objects = map[string]*object{}
	c.lru.Init()
	c.used = 0
	c.stats.Bytes.Store(0)
	liveMu.Lock()
	delete(live, c.dir)
	liveMu.Unlock()
	return os.RemoveAll(c.dir)
}

// id names an object version. A hash keeps file names short and inside
// the cache directory whatever the key holds.
func id(key, etag string) string {
	h := sha256.Sum256([]byte(key + "\x00" + etag))
	return hex.EncodeToString(h[:16])
}

// ReadAt fills p with the object's bytes at off when the cache holds all
// of them, and reports whether it did. size is the object's size.
func (c *Cache) ReadAt(key, etag string, size int64, p []byte, off int64) bool {
	end := off + int64(len(p))
	if len(p) == 0 || off < 0 || end > size {
		return false
	}
	c.mu.Lock()
	o := c.objects[id(key, etag)]
	var held []*block
	if o != nil {
		held = o.holding(off/pageSize, (end-1)/pageSize)
	}
	if held == nil {
		c.mu.Unlock()
		c.stats.Misses.Add(1)
		return false
	}
	for _, b := range held {
		b.refs++
		c.lru.MoveToFront(b.elem)
	}
	c.mu.Unlock()

	n, err := o.f.ReadAt(p, off)

	c.mu.Lock()
	for _, b := range held {
		b.refs--
	}
	c.mu.Unlock()
	if err != nil || n != len(p) {
		c.stats.Misses.Add(1)
		return false
	}
	c.stats.Hits.Add(1)
	return true
}

// holding returns the blocks of pages first..last when every page is
// present, else nil.
func (o *object) holding(first, last int64) []*block {
	var held []*block
	for pg := first; pg <= last; pg++ {
		b := o.blocks[pg/pagesPerBlock]
		if b == nil || !b.has(pg%pagesPerBlock) {
			return nil
		}
		if len(held) == 0 || held[len(held)-1] != b {
			held = append(held, b)
		}
	}
	return held
}

func (b *block) has(i int64) bool { return b.pages[i/64]&(1<<(i%64)) != 0 }

// set marks page i present and reports whether it was not before.
func (b *block) set(i int64) bool {
	if b.has(i) {
		return false
	}
	b.pages[i/64] |= 1 << (i % 64)
	b.count++
	return true
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
	from, to := first*pageSize, min(stop*pageSize, size)

	c.mu.Lock()
	o, err := c.object(key, etag)
	if err != nil {
		c.mu.Unlock()
		c.stats.WriteErrors.Add(1)
		return
	}
	var held []*block
	for bi := first / pagesPerBlock; bi <= (stop-1)/pagesPerBlock; bi++ {
		b := o.blocks[bi]
		if b == nil {
			b = &block{obj: o, index: bi}
			b.elem = c.lru.PushFront(b)
			o.blocks[bi] = b
		}
		b.refs++
		held = append(held, b)
	}
	c.mu.Unlock()

	_, werr := o.f.WriteAt(p[from-off:to-off], from)

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range held {
		b.refs--
	}
	if werr != nil {
		c.stats.WriteErrors.Add(1)
		for _, b := range held {
			if b.count == 0 && b.refs == 0 {
				c.drop(b)
			}
		}
		return
	}
	for pg := first; pg < stop; pg++ {
		if o.blocks[pg/pagesPerBlock].set(pg % pagesPerBlock) {
			c.used += pageSize
		}
	}
	for _, b := range held {
		c.lru.MoveToFront(b.elem)
	}
	c.evict()
	c.stats.Bytes.Store(c.used)
}

// object returns the file of an object version, creating it empty.
func (c *Cache) object(key, etag string) (*object, error) {
	k := id(key, etag)
	if o := c.objects[k]; o != nil {
		return o, nil
	}
	f, err := os.OpenFile(filepath.Join(c.dir, k), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	o := &object{id: k, f: f, blocks: map[int64]*block{}}
	c.objects[k] = o
	return o, nil
}

// evict drops least recently used blocks until the cache fits its limit.
// Blocks in use stay; the cache may run over by them until they are
// released and the next Store evicts again.
func (c *Cache) evict() {
	for e := c.lru.Back(); e != nil && c.used > c.limit; {
		b := e.Value.(*block)
		e = e.Prev()
		if b.refs > 0 {
			continue
		}
		c.drop(b)
		c.stats.Evictions.Add(1)
	}
}

// drop forgets a block and frees its disk space; an object with no
// blocks left loses its file. Called with c.mu held, so that no read or
// write can start on the range while the hole is punched.
func (c *Cache) drop(b *block) {
	o := b.obj
	c.lru.Remove(b.elem)
	delete(o.blocks, b.index)
	c.used -= int64(b.count) * pageSize
	if len(o.blocks) == 0 {
		o.f.Close()
		os.Remove(o.f.Name())
		delete(c.objects, o.id)
		return
	}
	if b.count > 0 {
		// Without the hole the disk would keep what the limit says is gone.
		if err := unix.Fallocate(int(o.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, b.index*blockSize, blockSize); err != nil {
			// The bytes stay on disk but are never read (their pages are
			// gone from the index); the file goes with its object.
			c.stats.WriteErrors.Add(1)
		}
	}
}
