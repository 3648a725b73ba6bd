package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
)

// The consistency contract's versions: an open handle reads exactly one
// version of an object; a read-modify-write starts from the version the
// store holds. "Another client" below is a write straight to the store.

// A handle whose object another client replaces keeps reading the
// version it opened, or fails with ESTALE once the store no longer has
// it: never the new version's bytes after the old one's.
func TestOpenHandleReadsOneVersion(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const size = 1 << 20
			st := b.fresh(t)
			v1, v2 := randomBytes(size), randomBytes(size)
			f, path := openWatched(t, st, v1)
			p := make([]byte, 4096)
			if _, err := f.ReadAt(p, 0); err != nil || !bytes.Equal(p, v1[:4096]) {
				t.Fatalf("first read: %v, v1's bytes %v", err, bytes.Equal(p, v1[:4096]))
			}
			put(t, st, "f", v2)
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			dropPages(t, f)
			off := int64(size / 2)
			_, err := f.ReadAt(p, off)
			switch {
			case errors.Is(err, syscall.ESTALE):
			case err != nil:
				t.Fatalf("read after the replace: %v, want ESTALE", err)
			case bytes.Equal(p, v2[off:off+4096]):
				t.Fatal("the handle opened on v1 read v2's bytes")
			case !bytes.Equal(p, v1[off:off+4096]):
				t.Fatal("the handle read bytes of neither version")
			default:
				t.Fatal("read v1's bytes the store no longer has")
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("a new open: %v, v2's bytes %v", err, bytes.Equal(got, v2))
			}
		})
	}
}

// A handle opened on attributes that are already out of date (another
// client replaced the object within the stat TTL) reads the version the
// store holds: its first read moves to it instead of failing.
func TestFirstReadOfAReplacedFileReadsTheNewVersion(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const size = 3 << 20
			st := b.fresh(t)
			v1, v2 := randomBytes(size), randomBytes(size)
			put(t, st, "f", v1)
			fsys, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
			path := filepath.Join(dir, "f")
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			put(t, st, "f", v2)
			if writebackMounts {
				// The inode stays with v1 (the kernel keeps its size): that
				// read fails, and the next open gets v2's inode.
				if _, err := os.ReadFile(path); !errors.Is(err, syscall.ESTALE) {
					t.Fatalf("under the writeback cache, the first read: %v, want ESTALE", err)
				}
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("read: %v, v2's bytes %v, v1's %v", err, bytes.Equal(got, v2), bytes.Equal(got, v1))
			}
			if fsys.Stats().BytesRead.Load() < size {
				t.Fatal("the mount served no read: the test proves nothing")
			}
		})
	}
}

// READs of one handle run side by side (readahead): when one of them
// moves the handle to a version that replaced the opened one before it
// read a byte, another that was already reading the old version reads
// again, so that the handle never returns bytes of both.
func TestSideBySideReadsOfOneHandleReadOneVersion(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const size, off = 2 << 20, 1 << 20
			v1, v2 := randomBytes(size), randomBytes(size)
			st := &heldGet{Store: b.fresh(t), from: off, reached: make(chan struct{}), release: make(chan struct{})}
			put(t, st, "f", v1)
			dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
			f, err := os.Open(filepath.Join(dir, "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			type result struct {
				p   []byte
				err error
			}
			late := make(chan result, 1)
			go func() {
				p := make([]byte, 4096)
				_, err := f.ReadAt(p, off)
				late <- result{p, err}
			}()
			<-st.reached // that READ holds v1's bytes
			put(t, st, "f", v2)
			p := make([]byte, 4096)
			if writebackMounts {
				// The handle stays on v1: its read fails, and the read
				// beside it returns v1's bytes or fails too.
				_, err := f.ReadAt(p, 0)
				close(st.release)
				r := <-late
				if !errors.Is(err, syscall.ESTALE) {
					t.Fatalf("under the writeback cache, the first read: %v, want ESTALE", err)
				}
				if r.err != nil && !errors.Is(r.err, syscall.ESTALE) {
					t.Fatalf("the read beside it: %v", r.err)
				}
				if r.err == nil && !bytes.Equal(r.p, v1[off:off+4096]) {
					t.Fatal("the read beside it returned bytes of another version than the handle's")
				}
				return
			}
			if _, err := f.ReadAt(p, 0); err != nil || !bytes.Equal(p, v2[:4096]) {
				t.Fatalf("first read to end: %v, v2's bytes %v", err, bytes.Equal(p, v2[:4096]))
			}
			close(st.release)
			r := <-late
			switch {
			case errors.Is(r.err, syscall.ESTALE):
			case r.err != nil:
				t.Fatalf("the read beside it: %v", r.err)
			case bytes.Equal(r.p, v1[off:off+4096]):
				t.Fatal("one handle returned v2's bytes and v1's")
			case !bytes.Equal(r.p, v2[off:off+4096]):
				t.Fatal("the read beside it returned bytes of neither version")
			}
		})
	}
}

// A handle left on a version another client replaced serves none of it
// from the mount's caches: those bytes would land in the page cache that
// a handle opened on the new version reads too.
func TestReplacedVersionStaysOutOfThePageCache(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			const size, off = 1 << 20, 512 << 10
			v1, v2 := randomBytes(size), randomBytes(size)
			st := b.fresh(t)
			put(t, st, "f", v1)
			fsys, dir := mountFSOf(t, st, fusefs.Options{ReadCacheSize: 4 * size, StatTTL: time.Nanosecond, ListTTL: time.Nanosecond})
			path := filepath.Join(dir, "f")
			old, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			p := make([]byte, 4096)
			if _, err := old.ReadAt(p, off); err != nil || !bytes.Equal(p, v1[off:off+4096]) {
				t.Fatalf("read of v1: %v", err)
			}
			if fsys.ReadCache() == nil || fsys.ReadCache().Stats().Bytes.Load() < 4096 {
				t.Fatal("v1 is not in the read cache: the test proves nothing")
			}
			dropPages(t, old)
			put(t, st, "f", v2)
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			cur, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer cur.Close()
			if _, err := old.ReadAt(p, off); err == nil && !bytes.Equal(p, v1[off:off+4096]) {
				t.Fatal("the old handle read bytes of another version than its own")
			}
			if _, err := cur.ReadAt(p, off); err != nil || !bytes.Equal(p, v2[off:off+4096]) {
				t.Fatalf("the handle opened on v2: %v, v2's bytes %v, v1's %v", err, bytes.Equal(p, v2[off:off+4096]), bytes.Equal(p, v1[off:off+4096]))
			}
		})
	}
}

// heldGet holds the first GET at or after offset from, with its bytes
// already read, until release is closed.
type heldGet struct {
	store.Store
	from             int64
	reached, release chan struct{}
	once             sync.Once
}

func (s *heldGet) Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error) {
	body, err := s.Store.Get(ctx, key, etag, off, length)
	if err != nil || off < s.from {
		return body, err
	}
	held := false
	s.once.Do(func() { held = true })
	if !held {
		return body, nil
	}
	defer body.Close()
	data, err := io.ReadAll(body)
	close(s.reached)
	<-s.release
	return io.NopCloser(bytes.NewReader(data)), err
}

// A write into an existing object another client replaced since the
// mount read its attributes changes the version the store holds: none of
// the other client's bytes are lost to the older, shorter size.
func TestWriteInPlaceStartsFromTheVersionThere(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			put(t, st, "f", []byte("0123456789"))
			dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
			path := filepath.Join(dir, "f")
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			put(t, st, "f", []byte("abcdefghijklmnopqrst"))
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt([]byte("XYZ"), 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if writebackMounts {
				// The kernel keeps the inode's old size: the write stays
				// on the version it has, which the store no longer holds.
				if !errors.Is(err, syscall.ESTALE) {
					t.Fatalf("a write into a version replaced since: %v, want ESTALE", err)
				}
				if got, want := string(stored(t, st, "f")), "abcdefghijklmnopqrst"; got != want {
					t.Fatalf("stored %q, want the other client's %q", got, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(stored(t, st, "f")), "XYZdefghijklmnopqrst"; got != want {
				t.Fatalf("stored %q, want %q", got, want)
			}
		})
	}
}

// The read cache keeps each version's bytes under that version's ETag: a
// GET made for one version never fills the cache for another. The mount
// is first told of v1 (a stale HEAD and listing, as from an eventually
// consistent store) while the store holds v2; once v1 is really back,
// reads must return v1, not v2's bytes cached under v1's ETag.
func TestReadCacheKeepsVersionsApart(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			const size = 4 << 20
			inner := b.fresh(t)
			v1, v2 := randomBytes(size), randomBytes(size)
			put(t, inner, "f", v1)
			o1, err := inner.Head(t.Context(), "f")
			if err != nil {
				t.Fatal(err)
			}
			st := &staleAttrs{Store: inner}
			st.freeze(o1)
			fsys, dir := mountFSOf(t, st, fusefs.Options{ReadCacheSize: size, StatTTL: time.Nanosecond, ListTTL: time.Nanosecond})
			path := filepath.Join(dir, "f")
			const off = 1 << 20
			readAt := func() ([]byte, error) {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				dropPages(t, f)
				p := make([]byte, 4096)
				_, err = f.ReadAt(p, off)
				return p, err
			}
			put(t, inner, "f", v2)
			switch p, err := readAt(); {
			case errors.Is(err, syscall.ESTALE): // v1 is gone
			case err != nil:
				t.Fatalf("read while the mount is told of v1: %v", err)
			case !bytes.Equal(p, v2[off:off+4096]):
				t.Fatal("read while the mount is told of v1: bytes of neither version")
			}
			put(t, inner, "f", v1) // v1 again: its ETag again, whatever the server
			st.freeze(store.Object{})
			if p, err := readAt(); err != nil || !bytes.Equal(p, v1[off:off+4096]) {
				t.Fatalf("read of v1 put back: %v, v1's bytes %v, v2's %v", err, bytes.Equal(p, v1[off:off+4096]), bytes.Equal(p, v2[off:off+4096]))
			}
			if fsys.ReadCache() == nil {
				t.Fatal("no read cache: the test proves nothing")
			}
		})
	}
}

// staleAttrs answers HEADs and listings of one object with attributes it
// was given (freeze), whatever the store holds: a stale answer.
type staleAttrs struct {
	store.Store
	mu     sync.Mutex
	frozen store.Object
}

func (s *staleAttrs) freeze(o store.Object) {
	s.mu.Lock()
	s.frozen = o
	s.mu.Unlock()
}

func (s *staleAttrs) stale(key string) (store.Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen, s.frozen.Key == key && key != ""
}

func (s *staleAttrs) Head(ctx context.Context, key string) (store.Object, error) {
	if o, ok := s.stale(key); ok {
		return o, nil
	}
	return s.Store.Head(ctx, key)
}

func (s *staleAttrs) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		for e, err := range s.Store.List(ctx, prefix, startAfter, recursive) {
			if o, ok := s.stale(e.Key); ok && err == nil {
				e.Object = o
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

// theConflictCopy returns the key of the one conflict copy of key in st.
func theConflictCopy(t *testing.T, st store.Store, key string) string {
	t.Helper()
	var kept []string
	for e, err := range st.List(t.Context(), "", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(e.Key, key+".objfuse-conflict-") {
			kept = append(kept, e.Key)
		}
	}
	if len(kept) != 1 {
		t.Fatalf("conflict copies %q, want one", kept)
	}
	return kept[0]
}

// A change in place to a file another client replaced after the mount
// loaded it never overwrites that client's version: the close fails, the
// change is kept under a conflict name, and the mount's Health names it.
// A whole replacement (O_TRUNC) stays last-writer-wins, as S3 itself.
func TestWriteConflictKeepsBothVersions(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			put(t, st, "f", []byte("0123456789"))
			put(t, st, "g", []byte("0123456789"))
			fsys, dir := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
			f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close() // on failure; closed below
			if _, err := f.WriteAt([]byte("XYZ"), 0); err != nil {
				t.Fatal(err)
			}
			g, err := os.OpenFile(filepath.Join(dir, "g"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if _, err := g.Write([]byte("mine")); err != nil {
				t.Fatal(err)
			}
			put(t, st, "f", []byte("abcdefghij")) // the other writer's
			put(t, st, "g", []byte("abcdefghij"))
			if err := f.Close(); !errors.Is(err, syscall.EIO) {
				t.Fatalf("close of the losing change: %v, want EIO", err)
			}
			if writebackMounts {
				// The kernel held the change until the close, by when
				// the version it was made to had gone: the close fails
				// and nothing is stored over the other writer's.
				if got := string(stored(t, st, "f")); got != "abcdefghij" {
					t.Fatalf("f holds %q: the other writer's version was overwritten", got)
				}
				return
			}
			if err := g.Close(); err != nil {
				t.Fatalf("close of a whole replacement: %v", err)
			}
			if got := string(stored(t, st, "f")); got != "abcdefghij" {
				t.Fatalf("f holds %q: the other writer's version was overwritten", got)
			}
			if got := string(stored(t, st, "g")); got != "mine" {
				t.Fatalf("g holds %q, want the last whole replacement", got)
			}
			kept := theConflictCopy(t, st, "f")
			if got := string(stored(t, st, kept)); got != "XYZ3456789" {
				t.Fatalf("the conflict copy holds %q, want the change made here", got)
			}
			if h := fsys.Health(); h.Conflicts != 1 || !strings.Contains(h.LastConflict, kept) {
				t.Fatalf("health: %d conflicts, latest %q; want 1 naming %s", h.Conflicts, h.LastConflict, kept)
			}
			if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(got) != "abcdefghij" {
				t.Fatalf("reading f after the conflict: %q, %v", got, err)
			}
		})
	}
}

// A chmod of a file another client replaced after the mount read its
// attributes changes the mode of the version there and keeps the rest of
// its metadata: the mount's older mtime does not overwrite the other
// client's.
func TestChmodKeepsTheOtherWritersMetadata(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			put(t, st, "f", []byte("old"))
			dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
			path := filepath.Join(dir, "f")
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			const theirs = "1500000000" // 2017: unlike the mount's
			if _, err := st.Put(t.Context(), "f", strings.NewReader("new"), 3, map[string]string{"mtime": theirs, "mode": "33188"}); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			o, err := st.Head(t.Context(), "f")
			if err != nil {
				t.Fatal(err)
			}
			if o.Metadata["mtime"] != theirs || o.Metadata["mode"] != strconv.Itoa(syscall.S_IFREG|0o600) {
				t.Fatalf("metadata after chmod %v, want the other writer's mtime %s and mode 0600", o.Metadata, theirs)
			}
			if got := string(stored(t, st, "f")); got != "new" {
				t.Fatalf("content %q after chmod", got)
			}
		})
	}
}

// An append to a file another client made longer after the mount read
// its attributes lands at the end of the version there, not at the end
// the kernel knew, which would overwrite the other client's bytes.
func TestAppendGoesAtTheEndOfTheVersionThere(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			put(t, st, "f", []byte("0123456789"))
			dir := mountFS(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: time.Hour})
			path := filepath.Join(dir, "f")
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			put(t, st, "f", []byte("abcdefghijklmnopqrst"))
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close() // on failure; closed below
			_, err = f.Write([]byte("XY"))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if writebackStale(t, err, st, "f", "abcdefghijklmnopqrst") {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(stored(t, st, "f")), "abcdefghijklmnopqrstXY"; got != want {
				t.Fatalf("stored %q, want %q", got, want)
			}
		})
	}
}

// A handle reading a version another client has replaced by a shorter
// one does not find its file ended early: a stat (or the kernel's own
// attribute check before a read) while it reads must not tell the
// kernel the new, shorter size, which would end the handle's read(2)
// where the new version ends, without asking the mount. It reads on in
// its version or fails with ESTALE. A handle opened meanwhile reads the
// new version whole, shorter or longer: neither cut at the old size nor
// answered short of it.
func TestAReplacedVersionDoesNotCutAReadShort(t *testing.T) {
	for _, b := range backends() {
		for _, newSize := range []int{64 << 10, 3 << 20} {
			t.Run(b.name+"/"+strconv.Itoa(newSize), func(t *testing.T) {
				const size, half = 2 << 20, 1 << 20
				st := b.fresh(t)
				v1, v2 := randomBytes(size), randomBytes(newSize)
				f, path := openWatched(t, st, v1)
				p := make([]byte, half)
				if _, err := io.ReadFull(f, p); err != nil || !bytes.Equal(p, v1[:half]) {
					t.Fatalf("first half: %v, v1's bytes %v", err, bytes.Equal(p, v1[:half]))
				}
				put(t, st, "f", v2)
				if _, err := os.Stat(path); err != nil {
					t.Fatal(err)
				}
				k, err := io.ReadFull(f, p)
				switch {
				case errors.Is(err, syscall.ESTALE):
				case err != nil && k == 0:
					t.Fatalf("second half: %v after %d bytes, want v1's bytes or ESTALE", err, k)
				case !bytes.Equal(p[:k], v1[half:half+k]):
					t.Fatal("the handle opened on v1 read bytes of another version")
				case k < half:
					t.Fatalf("the read ended %d bytes into the second half: %v", k, err)
				}
				// f is still open on v1.
				if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, v2) {
					t.Fatalf("a new open: %v, %d bytes, v2's %v", err, len(got), bytes.Equal(got, v2))
				}
			})
		}
	}
}

// openWatched puts v1 at "f", mounts st with every stat asking the store,
// so that the mount learns at once of a version that replaces it, and
// opens f there (closed before the mount goes).
func openWatched(t *testing.T, st store.Store, v1 []byte) (*os.File, string) {
	t.Helper()
	put(t, st, "f", v1)
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Nanosecond, ListTTL: time.Nanosecond})
	path := filepath.Join(dir, "f")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// A server may answer a HEAD or a listing with one version's size and
// another's ETag (versitygw does while a PUT commits: it reads the two
// apart). An append made from such attributes starts from the whole
// version the ETag names, loaded to its end, so what the other writer
// added before it stays: a conditional upload of the older content under
// the newer ETag would pass and drop it silently.
func TestAnAppendKeepsWhatAnAttributeOfTwoVersionsHid(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := &sizeOfAnother{Store: b.fresh(t), key: "f"}
			st.size.Store(-1)
			put(t, st, "f", []byte("aaaa"))
			dir := mountFS(t, st, fusefs.Options{StatTTL: time.Nanosecond, ListTTL: time.Nanosecond})
			path := filepath.Join(dir, "f")
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			st.size.Store(4) // from now on, attributes say the first version's size
			put(t, st, "f", []byte("aaaabbbb"))
			err := appendTo(path, []byte("cccc"))
			if writebackStale(t, err, st, "f", "aaaabbbb") {
				return
			}
			if err != nil {
				t.Fatalf("append: %v", err)
			}
			if got := stored(t, st, "f"); string(got) != "aaaabbbbcccc" {
				t.Fatalf("the store holds %q, want the other writer's bbbb kept before cccc", got)
			}
		})
	}
}

// sizeOfAnother reports size (when >= 0) as key's size in HEADs and
// listings, whatever version is there.
type sizeOfAnother struct {
	store.Store
	key  string
	size atomic.Int64 // set by the test while the mount asks
}

func (s *sizeOfAnother) Head(ctx context.Context, key string) (store.Object, error) {
	o, err := s.Store.Head(ctx, key)
	if size := s.size.Load(); err == nil && key == s.key && size >= 0 {
		o.Size = size
	}
	return o, err
}

func (s *sizeOfAnother) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		for e, err := range s.Store.List(ctx, prefix, startAfter, recursive) {
			if size := s.size.Load(); err == nil && e.Key == s.key && size >= 0 {
				e.Size = size
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

func appendTo(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
