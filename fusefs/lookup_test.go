package fusefs_test

import (
	"context"
	"iter"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// countingStore counts HEADs and listings, and holds listings while
// hold is open (not closed).
type countingStore struct {
	store.Store
	heads, lists chan struct{}
}

func (s *countingStore) Head(ctx context.Context, key string) (store.Object, error) {
	s.heads <- struct{}{}
	return s.Store.Head(ctx, key)
}

func (s *countingStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	s.lists <- struct{}{}
	return s.Store.List(ctx, prefix, startAfter, recursive)
}

func drain(c chan struct{}) int {
	n := 0
	for {
		select {
		case <-c:
			n++
		default:
			return n
		}
	}
}

// A stat of an unlisted file is one HEAD. When the bucket holds both "d"
// and "d/e", a listing makes d the directory, and it stays one after
// every cache has expired.
func TestLookupIsOneHeadAndListedDirectoriesWin(t *testing.T) {
	mem := memstore.New()
	put(t, mem, "plain", []byte("plain"))
	put(t, mem, "d", []byte("file d"))
	put(t, mem, "d/e", []byte("d/e"))
	st := &countingStore{Store: mem, heads: make(chan struct{}, 1000), lists: make(chan struct{}, 1000)}
	const ttl = 50 * time.Millisecond
	dir := mountFS(t, st, fusefs.Options{StatTTL: ttl, ListTTL: ttl})

	drain(st.heads)
	drain(st.lists)
	fi, err := os.Stat(filepath.Join(dir, "plain"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("stat plain: %v, %v", fi, err)
	}
	if h, l := drain(st.heads), drain(st.lists); h != 1 || l != 0 {
		t.Fatalf("stat of an unlisted file sent %d HEADs and %d LISTs, want 1 and 0", h, l)
	}

	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * ttl)
	for time.Now().Before(deadline) {
		fi, err := os.Stat(filepath.Join(dir, "d"))
		if err != nil || !fi.IsDir() {
			t.Fatalf("after a listing, d is %v (%v), want the directory", fi.Mode(), err)
		}
	}
	if got := string(readFile(t, filepath.Join(dir, "d", "e"))); got != "d/e" {
		t.Fatalf("d/e reads %q", got)
	}
}
