package readcache

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// content is a recognisable object body: pseudo-random bytes with no
// period, so that a page served from the wrong place (another page, another
// segment) shows.
func content(size int64) []byte { return contentOf("", size) }

// contentOf is key's body: another key's bytes differ everywhere.
func contentOf(key string, size int64) []byte {
	var seed int64
	for _, c := range key {
		seed = seed*131 + int64(c)
	}
	b := make([]byte, size)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func newCache(t *testing.T, limit int64) *Cache {
	t.Helper()
	c, err := New(t.TempDir(), limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestReadAtHitsWhatWasStored(t *testing.T) {
	const size = 3*blockSize + 1000 // a short last page
	obj := content(size)
	tests := []struct {
		name          string
		storeOff      int64
		storeLen      int
		readOff       int64
		readLen       int
		wantHit       bool
		wantCachedLen int64
	}{
		{"same page", 8192, 4096, 8192, 4096, true, 4096},
		{"inside a stored range", 0, 64 << 10, 10000, 100, true, 64 << 10},
		{"unaligned store keeps whole pages only", 100, 8192, 100, 100, false, 4096},
		{"unaligned store serves its whole page", 100, 8192, 4096, 4096, true, 4096},
		{"across a block boundary", blockSize - 8192, 16384, blockSize - 100, 200, true, 16384},
		{"past the stored range", 0, 4096, 4000, 200, false, 4096},
		{"the object's short last page", size - 1000, 1000, size - 500, 500, true, 4096},
		{"last page not from its start", size - 500, 500, size - 500, 500, false, 0},
		{"never stored", 0, 0, 0, 4096, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, 64<<20)
			if tc.storeLen > 0 {
				c.Store("k", "e1", size, obj[tc.storeOff:tc.storeOff+int64(tc.storeLen)], tc.storeOff)
			}
			if got := c.Stats().Bytes.Load(); got != tc.wantCachedLen {
				t.Errorf("cached %d bytes, want %d", got, tc.wantCachedLen)
			}
			p := make([]byte, tc.readLen)
			hit := c.ReadAt("k", "e1", size, p, tc.readOff)
			if hit != tc.wantHit {
				t.Fatalf("hit = %v, want %v", hit, tc.wantHit)
			}
			if hit && !bytes.Equal(p, obj[tc.readOff:tc.readOff+int64(tc.readLen)]) {
				t.Fatal("wrong bytes")
			}
		})
	}
}

func TestAnotherETagIsAMiss(t *testing.T) {
	c := newCache(t, 8<<20)
	obj := content(1 << 20)
	c.Store("k", "old", 1<<20, obj[:65536], 0)
	p := make([]byte, 4096)
	if c.ReadAt("k", "new", 1<<20, p, 0) {
		t.Fatal("a new version of the object was served the old one's bytes")
	}
	if c.ReadAt("other", "old", 1<<20, p, 0) {
		t.Fatal("another key was served this one's bytes")
	}
	if !c.ReadAt("k", "old", 1<<20, p, 0) {
		t.Fatal("the stored version missed")
	}
}

// The cache stays within its limit by filling again the least recently
// used segments, and its file never grows past the limit.
func TestEvictionKeepsTheLimit(t *testing.T) {
	const limit = 4 << 20
	c := newCache(t, limit)
	obj := content(16 << 20)
	for i := int64(0); i < 16; i++ {
		c.Store("k", "e", int64(len(obj)), obj[i<<20:(i+1)<<20], i<<20)
		if i == 1 {
			// Block 0 read again: it is recent, so block 1 goes first.
			if !c.ReadAt("k", "e", int64(len(obj)), make([]byte, 4096), 0) {
				t.Fatal("block 0 missed")
			}
		}
		if i == 4 {
			p := make([]byte, 4096)
			if c.ReadAt("k", "e", int64(len(obj)), p, 1<<20) || !c.ReadAt("k", "e", int64(len(obj)), p, 0) {
				t.Fatal("the fifth block evicted block 0, read since, rather than block 1")
			}
		}
		if got := c.Stats().Bytes.Load(); got > limit {
			t.Fatalf("after block %d the cache holds %d bytes, over its %d limit", i, got, limit)
		}
	}
	if c.Stats().Evictions.Load() != 12 {
		t.Errorf("%d evictions, want 12", c.Stats().Evictions.Load())
	}
	p := make([]byte, 4096)
	for i := int64(0); i < 16; i++ {
		want := i >= 12
		if got := c.ReadAt("k", "e", int64(len(obj)), p, i<<20); got != want {
			t.Errorf("block %d: hit %v, want %v", i, got, want)
		}
	}
	if du := diskUsage(t, c.Dir()); du > limit+blockSize {
		t.Errorf("cache directory uses %d bytes of disk, limit %d", du, limit)
	}
}

// An object whose pages are all evicted is forgotten.
func TestEvictedObjectsAreForgotten(t *testing.T) {
	c := newCache(t, 2<<20)
	for i := range 10 {
		key := fmt.Sprint("k", i)
		c.Store(key, "e", 1<<20, contentOf(key, 1<<20), 0)
	}
	c.mu.Lock()
	n := len(c.objects)
	c.mu.Unlock()
	if n != 2 {
		t.Errorf("%d objects indexed in a cache of two 1 MiB segments", n)
	}
	p := make([]byte, 1<<20)
	for i := range 10 {
		key := fmt.Sprint("k", i)
		want := i >= 8
		if got := c.ReadAt(key, "e", 1<<20, p, 0); got != want {
			t.Errorf("%s: hit %v, want %v", key, got, want)
		} else if got && !bytes.Equal(p, contentOf(key, 1<<20)) {
			t.Errorf("%s: another object's bytes", key)
		}
	}
}

// A segment being read is never filled again under the read.
func TestEvictionSkipsSegmentsInUse(t *testing.T) {
	c := newCache(t, 2<<20)
	obj := content(1 << 20)
	c.Store("busy", "e", 1<<20, obj, 0)
	c.mu.Lock()
	sg := c.segments[c.objects[id("busy", "e", 1<<20)].pages[0].at/pagesPerSegment]
	sg.refs++ // as ReadAt holds it during its pread
	c.mu.Unlock()
	for i := range 4 {
		c.Store(fmt.Sprint("k", i), "e", 1<<20, obj, 0)
	}
	c.mu.Lock()
	sg.refs--
	c.mu.Unlock()
	p := make([]byte, 1<<20)
	if !c.ReadAt("busy", "e", 1<<20, p, 0) || !bytes.Equal(p, obj) {
		t.Fatal("the segment in use was evicted")
	}
}

// Pages read close in time lie close in the file, whatever their
// objects' offsets: random pages stored one after another are read back
// in the same order from consecutive pages of the cache's file.
func TestPagesLieInTheOrderTheyCame(t *testing.T) {
	const size = 64 << 20
	c := newCache(t, 8<<20)
	rng := rand.New(rand.NewSource(1))
	page := make([]byte, pageSize)
	var offs []int64
	for range 100 {
		off := rng.Int63n(size/pageSize) * pageSize
		c.mu.Lock()
		o, dup := c.objects[id("k", "e", size)]
		if dup {
			_, dup = o.pages[off/pageSize]
		}
		c.mu.Unlock()
		if dup {
			continue
		}
		for i := range page {
			page[i] = byte(off/pageSize) + byte(i)
		}
		c.Store("k", "e", size, page, off)
		offs = append(offs, off)
	}
	c.mu.Lock()
	for i, off := range offs {
		if at := c.objects[id("k", "e", size)].pages[off/pageSize].at; at != int64(i) {
			t.Errorf("the page at %d, stored %dth, is the file's page %d", off, i, at)
		}
	}
	c.mu.Unlock()
	for _, off := range offs {
		if !c.ReadAt("k", "e", size, page, off) {
			t.Fatalf("page at %d missed", off)
		}
		for i := range page {
			if page[i] != byte(off/pageSize)+byte(i) {
				t.Fatalf("page at %d: wrong bytes", off)
			}
		}
	}
	if st, err := os.Stat(filepath.Join(c.Dir(), "pages")); err != nil || st.Size() != int64(len(offs))*pageSize {
		t.Errorf("the cache's file: %v, %v; want %d bytes, pages one after another", st.Size(), err, len(offs)*pageSize)
	}
}

// Concurrent readers and writers of overlapping ranges, under eviction
// pressure, never see wrong bytes (run with -race).
func TestConcurrentUseServesRightBytes(t *testing.T) {
	const size = 8 << 20
	c := newCache(t, 3<<20)
	obj := content(size)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			p := make([]byte, 64<<10)
			for range 2000 {
				off := rng.Int63n(size-int64(len(p))) &^ (pageSize - 1)
				n := 1 + rng.Intn(len(p))
				if c.ReadAt("k", "e", size, p[:n], off) {
					if !bytes.Equal(p[:n], obj[off:off+int64(n)]) {
						errs <- fmt.Errorf("wrong bytes at %d+%d", off, n)
						return
					}
					continue
				}
				c.Store("k", "e", size, obj[off:off+int64(n)], off)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c.Stats().Hits.Load() == 0 || c.Stats().Evictions.Load() == 0 {
		t.Fatalf("hits %d, evictions %d: the test did not exercise both", c.Stats().Hits.Load(), c.Stats().Evictions.Load())
	}
	if got := c.Stats().Bytes.Load(); got > 3<<20 {
		t.Errorf("cache holds %d bytes, limit %d", got, 3<<20)
	}
}

// Keys name no files: the cache's directory holds its one file whatever
// the keys are.
func TestKeysStayInsideTheDirectory(t *testing.T) {
	c := newCache(t, 4<<20)
	obj := content(8192)
	for _, key := range []string{"../../etc/passwd", "/abs", "a/b/../../..", "\x00"} {
		c.Store(key, "e", 8192, obj, 0)
		if !c.ReadAt(key, "e", 8192, make([]byte, 8192), 0) {
			t.Errorf("%q missed", key)
		}
	}
	files, err := os.ReadDir(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Name() != "pages" {
		t.Fatalf("the cache's directory holds %v, want only its file", files)
	}
}

func TestCloseRemovesTheDirectory(t *testing.T) {
	parent := t.TempDir()
	c, err := New(parent, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	c.Store("k", "e", 4096, content(4096), 0)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(parent, "*"))
	if len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// A write that fails (here: a file the cache cannot write) leaves the
// range uncached and the cache consistent.
func TestFailedWriteIsAMissLater(t *testing.T) {
	c := newCache(t, 4<<20)
	obj := content(8192)
	c.Store("k", "e", 8192, obj[:4096], 0)
	c.mu.Lock()
	// Long enough that a pread of the page that failed would find bytes:
	// only the index can make it a miss.
	if err := c.f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(c.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	c.f.Close()
	c.f = ro // read-only: the next write fails with EBADF
	c.mu.Unlock()
	c.Store("k", "e", 8192, obj[4096:], 4096)
	if c.Stats().WriteErrors.Load() != 1 {
		t.Fatalf("write errors %d, want 1", c.Stats().WriteErrors.Load())
	}
	p := make([]byte, 4096)
	if c.ReadAt("k", "e", 8192, p, 4096) {
		t.Fatal("a range that failed to write was served")
	}
	if !c.ReadAt("k", "e", 8192, p, 0) || !bytes.Equal(p, obj[:4096]) {
		t.Fatal("the range written before was lost")
	}
}

func TestNewRejectsTinyLimits(t *testing.T) {
	if _, err := New(t.TempDir(), 4096); err == nil {
		t.Fatal("a 4 KiB cache was accepted")
	}
}

func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		total += st.Blocks * 512
	}
	return total
}

// Directories of caches whose process is gone are removed by the next
// New; a live cache's directory, and unrelated entries, are not.
func TestNewRemovesDirectoriesOfDeadCaches(t *testing.T) {
	parent := t.TempDir()
	keep, err := New(parent, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	// pid_max is at most 4194304: no process has a pid above it.
	dead := filepath.Join(parent, dirPrefix+"99999999-1")
	sameDead := filepath.Join(parent, fmt.Sprintf("%s%d-crashed", dirPrefix, os.Getpid()))
	other := filepath.Join(parent, "not-ours")
	for _, d := range []string{dead, sameDead, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(parent, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range []string{dead, sameDead} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s: still there (%v)", filepath.Base(d), err)
		}
	}
	for _, d := range []string{other, keep.Dir(), c.Dir()} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", filepath.Base(d), err)
		}
	}
}

// A read holds every segment its pages are in: a run of pages that goes
// on from one segment of the file into the next keeps both from being
// filled again under it.
func TestAReadHoldsEverySegmentItsPagesAreIn(t *testing.T) {
	c := newCache(t, 4<<20)
	c.Store("a", "e", pageSize, contentOf("a", pageSize), 0) // slot 0
	const size = 1 << 20
	obj := contentOf("b", size)
	c.Store("b", "e", size, obj, 0) // slots 1 to 256: segments 0 and 1
	c.mu.Lock()
	o := c.objects[id("b", "e", size)]
	runs := o.runsOf(0, size/pageSize-1)
	c.hold(runs)
	held := [2]int{c.segments[0].refs, c.segments[1].refs}
	c.unhold(runs)
	after := [2]int{c.segments[0].refs, c.segments[1].refs}
	c.mu.Unlock()
	if held != [2]int{1, 1} || after != [2]int{0, 0} {
		t.Fatalf("refs while held %v, after %v; want [1 1] and [0 0]", held, after)
	}
	p := make([]byte, size)
	if !c.ReadAt("b", "e", size, p, 0) || !bytes.Equal(p, obj) {
		t.Fatal("the pages across two segments were not read back whole")
	}
}

// Pages stored for an object whose earlier pages the same Store evicted
// (to start a segment) are indexed, not lost.
func TestAStoreThatEvictsItsObjectsPagesKeepsItsNewOnes(t *testing.T) {
	c := newCache(t, 2<<20)
	a := contentOf("a", 2*pageSize)
	c.Store("a", "e", 2*pageSize, a[:pageSize], 0) // segment 0, least recently used
	fill := contentOf("f", 2<<20)
	c.Store("f", "e", 2<<20, fill[:blockSize-pageSize], 0)                                      // fills segment 0
	c.Store("f", "e", 2<<20, fill[blockSize-pageSize:2*blockSize-pageSize], blockSize-pageSize) // fills segment 1
	c.Store("a", "e", 2*pageSize, a[pageSize:], pageSize)                                       // evicts segment 0, with a's page 0
	p := make([]byte, pageSize)
	if !c.ReadAt("a", "e", 2*pageSize, p, pageSize) || !bytes.Equal(p, a[pageSize:]) {
		t.Fatal("the page stored last was lost")
	}
	if c.ReadAt("a", "e", 2*pageSize, p, 0) {
		t.Fatal("an evicted page was served")
	}
}

// Close while reads and writes are under way: they finish as misses,
// nothing panics, nothing is counted.
func TestCloseDuringUse(t *testing.T) {
	c, err := New(t.TempDir(), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	obj := contentOf("k", 1<<20)
	c.Store("k", "e", 1<<20, obj, 0)
	c.mu.Lock()
	runs := c.objects[id("k", "e", 1<<20)].runsOf(0, 0)
	c.hold(runs) // a ReadAt between its hold and its pread
	c.mu.Unlock()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.unhold(runs)
	c.mu.Unlock()
	c.Store("k", "e", 1<<20, obj, 0)
	if c.ReadAt("k", "e", 1<<20, make([]byte, pageSize), 0) {
		t.Fatal("a closed cache served a read")
	}
	if got := c.Stats().Bytes.Load(); got != 0 {
		t.Fatalf("a closed cache counts %d bytes", got)
	}
}
