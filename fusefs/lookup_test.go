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

// slowListStore holds every listing until release is closed, so a test can
// see what a lookup answers before the listing does.
type slowListStore struct {
	store.Store
	release chan struct{}
}

func (s *slowListStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		select {
		case <-s.release:
		case <-ctx.Done():
			yield(store.Entry{}, ctx.Err())
			return
		}
		for e, err := range s.Store.List(ctx, prefix, startAfter, recursive) {
			if !yield(e, err) {
				return
			}
		}
	}
}

// A stat of an unlisted file answers as soon as the HEAD does; when the
// listing then shows a directory of the same name, the directory wins.
func TestLookupAnswersFileBeforeListingThenDirectoryWins(t *testing.T) {
	mem := memstore.New()
	put(t, mem, "plain", []byte("plain"))
	put(t, mem, "d", []byte("file d"))
	put(t, mem, "d/e", []byte("d/e"))
	st := &slowListStore{Store: mem, release: make(chan struct{})}
	dir := mountFS(t, st, fusefs.Options{StatTTL: 50 * time.Millisecond, ListTTL: 50 * time.Millisecond})

	for _, name := range []string{"plain", "d"} {
		type result struct {
			fi  os.FileInfo
			err error
		}
		done := make(chan result, 1)
		go func() {
			fi, err := os.Stat(filepath.Join(dir, name))
			done <- result{fi, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(5 * time.Second):
			close(st.release) // let the stat finish before the unmount
			t.Fatalf("stat %s waited for the listing", name)
		}
		fi, err := r.fi, r.err
		if err != nil {
			t.Fatalf("stat %s while listings are held: %v", name, err)
		}
		if !fi.Mode().IsRegular() {
			t.Fatalf("%s is %v before the listing answers, want the file the HEAD found", name, fi.Mode())
		}
	}
	// Held open, the file the lookup found must still give way.
	open, err := os.Open(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	close(st.release)
	eventually(t, 5*time.Second, "d to become the directory", func() bool {
		fi, err := os.Stat(filepath.Join(dir, "d"))
		return err == nil && fi.IsDir()
	})
	if got := string(readFile(t, filepath.Join(dir, "d", "e"))); got != "d/e" {
		t.Fatalf("d/e reads %q", got)
	}
	// Later lookups (past every TTL) keep the directory.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		fi, err := os.Stat(filepath.Join(dir, "d"))
		if err != nil || !fi.IsDir() {
			t.Fatalf("d went back to %v, %v", fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "plain")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("plain: %v, %v", fi, err)
	}
}
