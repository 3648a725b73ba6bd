package fusefs_test

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
)

// Random reads read again after the kernel dropped its pages come from
// the read cache, with no GET; the cache keeps to its size; an object
// overwritten behind the mount's back is read anew, never from the cache.
func TestReadCacheServesRandomRereads(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const size, limit = 32 << 20, 2 << 20
			st := &fusefs.GetCounter{Store: b.fresh(t)}
			data := randomBytes(size)
			put(t, st, "obj", data)
			const ttl = 50 * time.Millisecond
			fsys, dir := mountFSOf(t, st, fusefs.Options{ReadCacheSize: limit, StatTTL: ttl, ListTTL: ttl})
			cache := fsys.ReadCache()
			if cache == nil {
				t.Fatal("no read cache")
			}
			rng := rand.New(rand.NewSource(1))
			offs := make([]int64, 100)
			for i := range offs {
				offs[i] = rng.Int63n(limit/2/4096) * 4096 // all fit the cache
			}
			f, err := os.Open(filepath.Join(dir, "obj"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			readAll := func(want []byte) {
				t.Helper()
				p := make([]byte, 4096)
				for _, off := range offs {
					if _, err := f.ReadAt(p, off); err != nil || !bytes.Equal(p, want[off:off+4096]) {
						t.Fatalf("pread at %d: %v, right bytes %v", off, err, bytes.Equal(p, want[off:off+4096]))
					}
				}
			}
			readAll(data)
			if st.Gets.Load() == 0 {
				t.Fatal("the first reads sent no GET")
			}
			dropPages(t, f)
			gets, fromCache := st.Gets.Load(), fsys.Stats().BytesFromCache.Load()
			readAll(data)
			if n := st.Gets.Load() - gets; n != 0 {
				t.Errorf("reads again sent %d GETs, want 0", n)
			}
			if fsys.Stats().BytesFromCache.Load() == fromCache {
				t.Error("no bytes came from the cache")
			}

			// Overwritten behind the mount: a new ETag, so new bytes.
			data2 := randomBytes(size)
			put(t, st, "obj", data2)
			// The mount's cache holds the old version's ranges now.
			eventually(t, 5*time.Second, "the new object's bytes", func() bool {
				g, err := os.Open(filepath.Join(dir, "obj"))
				if err != nil {
					return false
				}
				defer g.Close()
				p := make([]byte, 4096)
				if _, err := g.ReadAt(p, offs[0]); err != nil {
					return false
				}
				return bytes.Equal(p, data2[offs[0]:offs[0]+4096])
			})
			g, err := os.Open(filepath.Join(dir, "obj"))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			p := make([]byte, 4096)
			for _, off := range offs {
				if _, err := g.ReadAt(p, off); err != nil || !bytes.Equal(p, data2[off:off+4096]) {
					t.Fatalf("after the overwrite, pread at %d: %v, right bytes %v", off, err, bytes.Equal(p, data2[off:off+4096]))
				}
			}

			// Read more than fits: the cache stays within its limit.
			for range 1000 {
				off := limit + rng.Int63n((size-limit)/4096)*4096
				if _, err := g.ReadAt(p, off); err != nil || !bytes.Equal(p, data2[off:off+4096]) {
					t.Fatalf("pread at %d: %v", off, err)
				}
			}
			if got := cache.Stats().Bytes.Load(); got > limit || cache.Stats().Evictions.Load() == 0 {
				t.Errorf("cache holds %d bytes after %d evictions, limit %d", got, cache.Stats().Evictions.Load(), limit)
			}
		})
	}
}

// Close removes the cache's files.
func TestReadCacheDirectoryGoesWithTheFilesystem(t *testing.T) {
	st := &fusefs.GetCounter{Store: backends()[0].fresh(t)}
	put(t, st, "obj", randomBytes(1<<20))
	parent := t.TempDir()
	fsys, err := fusefs.New(st, fusefs.Options{ReadCacheSize: 2 << 20, ReadCacheDir: parent})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Fatalf("%d entries in the cache's parent, want its one directory", len(entries))
	}
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}
