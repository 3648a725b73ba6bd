package fusefs_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A directory renamed while files in it are written and closed, and new
// ones created, loses none of them: the rename copies, then deletes, and
// the closes in between used to upload under the old name just before
// the delete (lost), and creates to land under the old name. Here the
// rename is held between its copies and its deletes while a file is
// closed and another created; both must end under the new name.
func TestDirectoryRenameKeepsWritesMadeDuringIt(t *testing.T) {
	st := &heldDeletes{Store: memstore.New(), reached: make(chan struct{}), release: make(chan struct{})}
	put(t, st, "d/f", []byte("old"))
	put(t, st, "d/keep", []byte("k"))
	fsys, dir := mountFSOf(t, st, fusefs.Options{})
	f, err := os.OpenFile(filepath.Join(dir, "d", "f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // on failure; closed below
	renamed := make(chan error, 1)
	go func() { renamed <- os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "e")) }()
	select {
	case <-st.reached:
	case err := <-renamed:
		t.Fatalf("the rename ended (%v) without deleting", err)
	case <-time.After(time.Minute):
		t.Fatal("the rename never reached its deletes")
	}
	// The rename has copied d/ and waits to delete it.
	if _, err := f.WriteAt([]byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 2)
	go func() { closed <- f.Close() }()
	go func() { closed <- os.WriteFile(filepath.Join(dir, "d", "g"), []byte("g"), 0o644) }()
	// Either both changes are held back by the rename (as they must be),
	// or they reached the store under d/ (the bug): then let it go on.
	eventually(t, time.Minute, "the close and the create to be held back or stored", func() bool {
		return fusefs.HeldBackByRenames(fsys) == 2 || st.putsAfter() >= 2
	})
	close(st.release)
	if err := <-renamed; err != nil {
		t.Fatalf("rename: %v", err)
	}
	for range 2 {
		if err := <-closed; err != nil {
			t.Fatalf("close or create during the rename: %v", err)
		}
	}
	want := map[string]string{"e/f": "new", "e/g": "g", "e/keep": "k"}
	got := map[string]string{}
	for e, err := range st.List(t.Context(), "", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(e.Key, "/") {
			got[e.Key] = string(stored(t, st, e.Key))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the bucket holds %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("the bucket holds %q, want %q", got, want)
		}
	}
}

// heldDeletes holds the first Delete until release is closed, and counts
// the puts made while it is held.
type heldDeletes struct {
	store.Store
	reached, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	held             bool
	puts             int
}

func (s *heldDeletes) Delete(ctx context.Context, key string) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.held = true
		s.mu.Unlock()
		close(s.reached)
		<-s.release
	})
	return s.Store.Delete(ctx, key)
}

func (s *heldDeletes) count() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.puts++
	}
}

func (s *heldDeletes) putsAfter() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

func (s *heldDeletes) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	s.count()
	return s.Store.Put(ctx, key, r, size, meta)
}

func (s *heldDeletes) PutIfMatch(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	s.count()
	return s.Store.PutIfMatch(ctx, key, etag, r, size, meta)
}
