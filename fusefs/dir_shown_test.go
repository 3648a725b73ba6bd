package fusefs_test

import (
	"context"
	"iter"
	"os"
	"path/filepath"
	"sync"
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
// its marker where it has one, and nothing where it has none but a key
// below it was found within statTTL: never the HEAD and one-key LIST of
// a new name, a walk of the directory in MinIO. Evidence older than
// statTTL is asked again, and a marker removed elsewhere sends the
// lookup back to the full question, which finds the directory the keys
// below it still make.
func TestADirectoryLookedUpAgainCostsAtMostItsMarkersHead(t *testing.T) {
	mem := memstore.New()
	put(t, mem, "plain/f", []byte("f"))
	put(t, mem, "marked/", nil)
	put(t, mem, "marked/f", []byte("f"))
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
		for range again {
			walk(t, fsys, dir)
		}
		if h, l := st.counts("plain"); h != 0 || l != 0 {
			t.Errorf("%d lookups again of a directory without a marker, a key below it found lately: %d HEADs and %d LISTs, want none", again, h, l)
		}
		if h, l := st.counts("marked"); h != 0 || l != 0 {
			t.Errorf("%d lookups again of a directory with a marker: %d HEADs of a file of its name and %d LISTs, want none", again, h, l)
		}
		if h, _ := st.counts("marked/"); h != again {
			t.Errorf("%d lookups again of a directory with a marker: %d HEADs of the marker, want one each", again, h)
		}

		if err := mem.Delete(context.Background(), "marked/"); err != nil {
			t.Fatal(err)
		}
		walk(t, fsys, dir)
		if h, l := st.counts("marked"); h != 1 || l != 1 {
			t.Errorf("a lookup of a directory whose marker went: %d HEADs and %d LISTs, want the full question", h, l)
		}
		if h, _ := st.counts("marked/"); h != 1 {
			t.Errorf("a lookup of a directory whose marker went: %d HEADs of the marker, want 1", h)
		}
		walk(t, fsys, dir) // now without a marker, a key below it found lately
		h, l := st.counts("marked")
		if hm, _ := st.counts("marked/"); h+l+hm != 0 {
			t.Errorf("the next lookup: %d HEADs, %d LISTs and %d HEADs of the marker, want none", h, l, hm)
		}
	})

	t.Run("stale", func(t *testing.T) {
		st := newKeyCountingStore(mem)
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
