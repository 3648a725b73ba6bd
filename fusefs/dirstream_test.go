package fusefs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// pausedListStore yields the first `before` entries of every listing of
// prefix, then waits for resume (or fails with failWith).
type pausedListStore struct {
	store.Store
	prefix   string
	before   int
	resume   chan struct{}
	failWith error
}

func (s *pausedListStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		i := 0
		for e, err := range s.Store.List(ctx, prefix, startAfter, recursive) {
			if prefix == s.prefix && i == s.before {
				select {
				case <-s.resume:
				case <-ctx.Done():
					yield(store.Entry{}, ctx.Err())
					return
				}
				if s.failWith != nil {
					yield(store.Entry{}, s.failWith)
					return
				}
			}
			i++
			if !yield(e, err) {
				return
			}
		}
	}
}

// The kernel gets a directory's first entries while the rest of the
// listing is still on its way, and the whole directory once it arrives.
func TestReaddirStreamsEntriesAsTheListingArrives(t *testing.T) {
	mem := memstore.New()
	const total = 300
	for i := range total {
		put(t, mem, fmt.Sprintf("big/f%04d", i), []byte("x"))
	}
	st := &pausedListStore{Store: mem, prefix: "big/", before: 100, resume: make(chan struct{})}
	dir := mountFS(t, st, fusefs.Options{})
	d, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	type result struct {
		names []string
		err   error
	}
	first := make(chan result, 1)
	go func() {
		names, err := d.Readdirnames(10)
		first <- result{names, err}
	}()
	select {
	case r := <-first:
		if r.err != nil || len(r.names) != 10 || r.names[0] != "f0000" {
			t.Fatalf("first entries: %v, %v", r.names, r.err)
		}
	case <-time.After(10 * time.Second):
		close(st.resume)
		t.Fatal("no entry reached the kernel before the listing ended")
	}
	close(st.resume)
	rest, err := d.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != total-10 || slices.Contains(rest, "f0000") {
		t.Fatalf("the rest: %d names (want %d), first %q", len(rest), total-10, rest[0])
	}
	// Read again from the start through the same handle (rewinddir).
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	again, err := d.Readdirnames(-1)
	if err != nil || len(again) != total {
		t.Fatalf("after rewind: %d names, %v", len(again), err)
	}
}

// A listing that fails halfway is an error to the reader, not a
// directory that silently lost its tail.
func TestReaddirFailingHalfwayIsAnError(t *testing.T) {
	mem := memstore.New()
	for i := range 50 {
		put(t, mem, fmt.Sprintf("big/f%04d", i), []byte("x"))
	}
	resume := make(chan struct{})
	close(resume)
	st := &pausedListStore{Store: mem, prefix: "big/", before: 20, resume: resume,
		failWith: fmt.Errorf("list: %w", store.ErrUnavailable)}
	dir := mountFS(t, st, fusefs.Options{})
	_, err := os.ReadDir(filepath.Join(dir, "big"))
	if want := store.Errno(store.ErrUnavailable); !errors.Is(err, want) {
		t.Fatalf("reading a directory whose listing failed: %v, want %v", err, want)
	}
}

// A file and a directory of one name are one directory, whatever sorts
// between them ("d.txt" lies between "d" and "d/").
func TestReaddirDirectoryWinsOverFileOfSameName(t *testing.T) {
	mem := memstore.New()
	for _, k := range []string{"d", "d-1", "d.txt", "d/x", "e", "e/", "f", "g/h"} {
		put(t, mem, k, []byte(k))
	}
	dir := mountFS(t, mem, fusefs.Options{})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		if _, dup := got[e.Name()]; dup {
			t.Fatalf("%s listed twice", e.Name())
		}
		got[e.Name()] = e.IsDir()
	}
	want := map[string]bool{"d": true, "d-1": false, "d.txt": false, "e": true, "f": false, "g": true}
	if !maps.Equal(got, want) {
		t.Fatalf("root lists %v, want %v (name: is a directory)", got, want)
	}
}
