package fusefs_test

import (
	"bytes"
	"context"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// keyCountingStore counts HEADs by key and LISTs by prefix.
type keyCountingStore struct {
	store.Store
	mu    sync.Mutex
	heads map[string]int
	lists map[string]int
}

func newKeyCountingStore(st store.Store) *keyCountingStore {
	return &keyCountingStore{Store: st, heads: map[string]int{}, lists: map[string]int{}}
}

func (s *keyCountingStore) Head(ctx context.Context, key string) (store.Object, error) {
	s.mu.Lock()
	s.heads[key]++
	s.mu.Unlock()
	return s.Store.Head(ctx, key)
}

func (s *keyCountingStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	s.mu.Lock()
	s.lists[prefix]++
	s.mu.Unlock()
	return s.Store.List(ctx, prefix, startAfter, recursive)
}

// counts returns the HEADs of key and the LISTs of key+"/" since the last
// reset, and resets them.
func (s *keyCountingStore) counts(key string) (heads, lists int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heads, lists = s.heads[key], s.lists[key+"/"]
	delete(s.heads, key)
	delete(s.lists, key+"/")
	return heads, lists
}

// A directory the kernel looks up again (its entry expired, as it does
// every statTTL while readers walk paths through it) costs one HEAD of
// its marker: never the HEAD and one-key LIST of a new name, a walk of
// the directory in MinIO. The marker brings its attributes; where there
// is none, a key below it found within statTTL says it is there, and
// older evidence sends the lookup to the full question. A marker made or
// removed elsewhere is seen at the next lookup: made, its attributes
// show; removed, the directory the keys below it still make needs a new
// one before its last file goes, and gets it.
func TestADirectoryLookedUpAgainCostsAtMostItsMarkersHead(t *testing.T) {
	tree := func(t *testing.T) *memstore.Store {
		mem := memstore.New()
		put(t, mem, "plain/f", []byte("f"))
		put(t, mem, "marked/", nil)
		put(t, mem, "marked/f", []byte("f"))
		return mem
	}
	// The kernel forgets each directory's entry before each walk, as when
	// it expires; a file open in it keeps its inode, as a lookup again
	// does (the kernel forgets an inode without entries).
	hold := func(t *testing.T, dir string) {
		for _, name := range []string{"plain", "marked"} {
			d, err := os.Open(filepath.Join(dir, name, "f"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
		}
	}
	walk := func(t *testing.T, fsys *fusefs.FS, dir string) {
		t.Helper()
		for _, name := range []string{"plain", "marked"} {
			if err := fusefs.ForgetEntry(fsys, name); err != nil {
				t.Fatalf("forget %s: %v", name, err)
			}
			if _, err := os.Stat(filepath.Join(dir, name, "f")); err != nil {
				t.Fatal(err)
			}
		}
	}
	const again = 5

	t.Run("fresh", func(t *testing.T) {
		mem := tree(t)
		st := newKeyCountingStore(mem)
		fsys, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
		walk(t, fsys, dir)
		hold(t, dir)
		for _, name := range []string{"plain", "marked"} {
			if h, l := st.counts(name); h != 1 || l != 1 {
				t.Fatalf("first lookup of %s: %d HEADs and %d LISTs, want 1 and 1 (a new name)", name, h, l)
			}
		}
		st.counts("marked/")
		st.counts("plain/")
		for range again {
			walk(t, fsys, dir)
		}
		for _, name := range []string{"plain", "marked"} {
			if h, l := st.counts(name); h != 0 || l != 0 {
				t.Errorf("%d lookups again of %s: %d HEADs of a file of its name and %d LISTs, want none", again, name, h, l)
			}
			if h, _ := st.counts(name + "/"); h != again {
				t.Errorf("%d lookups again of %s: %d HEADs of its marker, want one each", again, name, h)
			}
		}

		// A marker made elsewhere brings its mode.
		ctx := context.Background()
		if _, err := mem.Put(ctx, "plain/", bytes.NewReader(nil), 0, map[string]string{"mode": strconv.Itoa(syscall.S_IFDIR | 0o700)}); err != nil {
			t.Fatal(err)
		}
		walk(t, fsys, dir)
		if fi, err := os.Stat(filepath.Join(dir, "plain")); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("after a marker with mode 0700 was made elsewhere: %v, %v", fi, err)
		}

		// A marker removed elsewhere: the keys below still make the
		// directory, which gets a marker again before its last file goes.
		if err := mem.Delete(ctx, "marked/"); err != nil {
			t.Fatal(err)
		}
		walk(t, fsys, dir)
		if err := os.Remove(filepath.Join(dir, "marked", "f")); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Head(ctx, "marked/"); err != nil {
			t.Errorf("the last file of a directory whose marker went elsewhere was removed, and the directory with it: %v", err)
		}
	})

	t.Run("stale", func(t *testing.T) {
		st := newKeyCountingStore(tree(t))
		fsys, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Nanosecond, ListTTL: time.Nanosecond})
		walk(t, fsys, dir)
		hold(t, dir)
		st.counts("plain")
		for range again {
			walk(t, fsys, dir)
		}
		if h, l := st.counts("plain"); h < again || l < again {
			t.Errorf("%d lookups again of a directory without a marker, nothing found below it within statTTL: %d HEADs and %d LISTs, want the full question each", again, h, l)
		}
	})
}
