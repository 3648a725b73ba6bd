package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// peekingStore counts a memory store's HEADs, peeks, GETs and LISTs, and
// peeks as S3 does (store.Peeker).
type peekingStore struct {
	*memstore.Store
	heads, peeks, wholePeeks, gets, lists atomic.Int64
}

func (s *peekingStore) Head(ctx context.Context, key string) (store.Object, error) {
	s.heads.Add(1)
	return s.Store.Head(ctx, key)
}

func (s *peekingStore) Peek(ctx context.Context, key string, dest []byte, whole bool) (store.Object, int, error) {
	s.peeks.Add(1)
	if whole {
		s.wholePeeks.Add(1)
	}
	return s.Store.Peek(ctx, key, dest, whole)
}

func (s *peekingStore) Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key, etag, off, length)
}

// TestLookupsThatReadsFollowPeek: files read as soon as they are looked
// up (a data loader) come with their lookup, one request each, once a
// few have shown the pattern: the lookup's peek brings the bytes that the
// read then takes from memory, without a GET. Every byte read is
// the file's. Files only stat'ed keep their HEAD: nothing is fetched for
// a stat.
func TestLookupsThatReadsFollowPeek(t *testing.T) {
	const files, size = 200, 20 << 10
	mem := memstore.New()
	content := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }
	for i := range files {
		put(t, mem, fmt.Sprintf("train/s%03d", i), content(i))
		put(t, mem, fmt.Sprintf("other/s%03d", i), content(i))
	}
	st := &peekingStore{Store: mem}
	fsys, dir := mountFSOf(t, st, fusefs.Options{ReadCacheSize: 8 << 20, StatTTL: time.Hour, ListTTL: time.Hour})

	for i := range files {
		if _, err := os.Stat(filepath.Join(dir, "other", fmt.Sprintf("s%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if p := st.peeks.Load(); p != 0 {
		t.Fatalf("stat of %d files peeked %d times, want none", files, p)
	}

	st.heads.Store(0)
	readTrainFiles(t, dir, files, content)
	heads, peeks, gets := st.heads.Load(), st.peeks.Load(), st.gets.Load()
	t.Logf("%d files looked up and read: %d HEADs, %d peeks, %d GETs; %d bytes from the read cache", files, heads, peeks, gets, fsys.Stats().BytesFromCache.Load())
	// The first few lookups show the pattern; a listing may answer some.
	if peeks < files*9/10 || heads+gets > files/10 {
		t.Fatalf("%d files read after their lookups: %d peeks, %d HEADs, %d GETs; want a peek for almost each and almost no HEAD or GET", files, peeks, heads, gets)
	}
	if fsys.Stats().Peeks.Load() != peeks {
		t.Errorf("Stats().Peeks %d, want %d", fsys.Stats().Peeks.Load(), peeks)
	}
	// The peeked bytes were handed to the reads in memory, which gave
	// it back as they took them.
	if got, want := fsys.Stats().BytesFromPeeks.Load(), int64(peeks)*size*9/10; got < want {
		t.Errorf("%d bytes read from peeks, want at least %d", got, want)
	}
	if held := fsys.Stats().BufferBytes.Load(); held != 0 {
		t.Errorf("%d bytes of memory still held once every peeked file was read, want 0", held)
	}
}

// A directory whose files all fit in a peek is peeked whole (a plain GET,
// which an S3 server answers with less work than a range); one whose
// files are longer is peeked by range, so that no GET brings more than
// the peek keeps. Either way the reads return the files' bytes.
func TestSmallFilesArePeekedWhole(t *testing.T) {
	const files = 60
	for _, c := range []struct {
		name  string
		size  int
		whole bool
	}{
		{"small", 100 << 10, true},
		{"long", 200 << 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := memstore.New()
			content := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, c.size) }
			for i := range files {
				put(t, mem, fmt.Sprintf("train/s%03d", i), content(i))
			}
			st := &peekingStore{Store: mem}
			_, dir := mountFSOf(t, st, fusefs.Options{ReadCacheSize: 8 << 20, StatTTL: time.Hour, ListTTL: time.Hour})
			readTrainFiles(t, dir, files, content)
			peeks, whole := st.peeks.Load(), st.wholePeeks.Load()
			t.Logf("%d files of %d bytes read: %d peeks, %d of them whole", files, c.size, peeks, whole)
			if peeks < files/2 {
				t.Fatalf("%d peeks of %d files read after their lookups, want most", peeks, files)
			}
			if c.whole && whole != peeks || !c.whole && whole != 0 {
				t.Errorf("%d of %d peeks whole, want %v", whole, peeks, map[bool]string{true: "all", false: "none"}[c.whole])
			}
		})
	}
}

// readTrainFiles reads train/s000 and on, files of them, each of which
// must hold content(i).
func readTrainFiles(t *testing.T, dir string, files int, content func(int) []byte) {
	t.Helper()
	for i := range files {
		got, err := os.ReadFile(filepath.Join(dir, "train", fmt.Sprintf("s%03d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content(i)) {
			t.Fatalf("s%03d: read %d bytes that are not the file's", i, len(got))
		}
	}
}
