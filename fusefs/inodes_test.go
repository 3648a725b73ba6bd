package fusefs_test

import (
	"context"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A walk of a tree of many entries (find, du, a backup) leaves the
// mount holding at most MaxInodes of them, and its heap with them: the
// kernel is handed back those unused longest. Without the bound the
// mount would hold every one the kernel looked up.
// OBJFUSE_TREE_ENTRIES sets the tree's size (default 200,000; the issue's
// case is 1,000,000, about a minute).
func TestATreeWalkKeepsTheInodeBound(t *testing.T) {
	entries := 200_000
	if s := os.Getenv("OBJFUSE_TREE_ENTRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			t.Fatalf("OBJFUSE_TREE_ENTRIES=%q: want a count of at least 1000", s)
		}
		entries = n
	}
	const perDir, bound = 1000, 10_000
	st := &generatedTree{Store: memstore.New(), dirs: entries / perDir, perDir: perDir}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	fsys, dir := mountFSOf(t, st, fusefs.Options{MaxInodes: bound})
	seen := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := os.Lstat(path); err != nil { // a lookup of each, as find -ls
			return err
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := st.dirs*perDir + st.dirs + 1; seen != want {
		t.Fatalf("walked %d entries, want %d", seen, want)
	}
	eventually(t, time.Minute, fmt.Sprintf("the mount to hold at most %d inodes", bound), func() bool { return fsys.Inodes() <= bound })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d entries walked; %d inodes held, heap grew %d MiB", seen, fsys.Inodes(), grown>>20)
	// About 1 KiB an inode held, and listings that expire: far below what
	// every entry would take.
	if limit := int64(bound) << 10 * 8; grown > limit {
		t.Fatalf("the heap grew %d MiB over the walk of %d entries, want at most %d MiB with %d inodes held", grown>>20, seen, limit>>20, bound)
	}
}

// generatedTree lists dirs directories of perDir empty files each
// without storing them: a tree of a million entries in no memory.
type generatedTree struct {
	*memstore.Store
	dirs, perDir int
}

func (g *generatedTree) file(key string) (store.Object, bool) {
	d, f, ok := strings.Cut(key, "/")
	if !ok || !strings.HasPrefix(d, "d") || !strings.HasPrefix(f, "f") {
		return store.Object{}, false
	}
	di, err1 := strconv.Atoi(d[1:])
	fi, err2 := strconv.Atoi(f[1:])
	if err1 != nil || err2 != nil || di >= g.dirs || fi >= g.perDir || key != g.key(di, fi) {
		return store.Object{}, false
	}
	return store.Object{Key: key, ETag: "e" + key, LastModified: time.Unix(1e9, 0), Metadata: map[string]string{}}, true
}

func (g *generatedTree) key(d, f int) string { return fmt.Sprintf("d%05d/f%04d", d, f) }

func (g *generatedTree) Head(ctx context.Context, key string) (store.Object, error) {
	if o, ok := g.file(key); ok {
		return o, nil
	}
	return store.Object{}, store.ErrNotExist
}

func (g *generatedTree) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		if prefix == "" && !recursive {
			for d := range g.dirs {
				p := fmt.Sprintf("d%05d/", d)
				if p > startAfter && !yield(store.Entry{Prefix: p}, nil) {
					return
				}
			}
			return
		}
		d, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(prefix, "d"), "/"))
		if err != nil || d >= g.dirs {
			return
		}
		for f := range g.perDir {
			o, _ := g.file(g.key(d, f))
			if o.Key > startAfter && strings.HasPrefix(o.Key, prefix) && !yield(store.Entry{Object: o}, nil) {
				return
			}
		}
	}
}

// TestListingAHugeDirectoryMakesFewInodes: READDIRPLUS makes inodes of
// the entries it lists only up to half the inode bound; past it the names
// reach the kernel alone. Every name is still listed, and each still
// answers a lookup.
func TestListingAHugeDirectoryMakesFewInodes(t *testing.T) {
	const entries, bound = 3000, 1000
	st := memstore.New()
	for i := range entries {
		put(t, st, fmt.Sprintf("d/f%05d", i), nil)
	}
	fsys, dir := mountFSOf(t, st, fusefs.Options{MaxInodes: bound, StatTTL: time.Hour, ListTTL: time.Hour})
	names, err := os.ReadDir(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != entries {
		t.Fatalf("listed %d entries, want %d", len(names), entries)
	}
	// The directory, and half the bound made by READDIRPLUS (a page of
	// entries may be looked up at once past it: go-fuse asks as it fills
	// the kernel's buffer, one entry at a time, so not past it by more
	// than one).
	if held := fsys.Inodes(); held > bound/2+1 {
		t.Fatalf("listing %d entries left %d inodes, want at most %d (half the bound)", entries, held, bound/2+1)
	}
	for _, e := range names[len(names)-10:] {
		if _, err := os.Stat(filepath.Join(dir, "d", e.Name())); err != nil {
			t.Fatalf("stat of a listed name: %v", err)
		}
	}
}

// TestListingADirectoryTooLargeToKeepAsksNoHeads: past the names a
// listing keeps, READDIRPLUS gives the kernel names alone rather than
// looking each up by name, a HEAD apiece, inside the listing.
func TestListingADirectoryTooLargeToKeepAsksNoHeads(t *testing.T) {
	const entries = 25_000 // past the 20,000 a listing keeps at the least budget
	mem := memstore.New()
	for i := range entries {
		put(t, mem, fmt.Sprintf("d/f%05d", i), nil)
	}
	st := &countingStore{Store: mem}
	_, dir := mountFSOf(t, st, fusefs.Options{MemoryLimit: 10 << 20, PartSize: 5 << 20, StatTTL: time.Hour, ListTTL: time.Hour})
	if _, err := os.Stat(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	st.heads.Store(0)
	names, err := os.ReadDir(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != entries {
		t.Fatalf("listed %d entries, want %d", len(names), entries)
	}
	if h := st.heads.Load(); h != 0 {
		t.Fatalf("listing %d entries sent %d HEADs, want none", entries, h)
	}
}
