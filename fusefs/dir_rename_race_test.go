package fusefs_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A directory renamed while files in it are written and closed, created
// or removed loses none of those changes: the rename copies, then
// deletes, and a close in between used to upload under the old name just
// before the delete (lost), a create to land under the old name, and a
// removed file to come back under the new one. Here the rename is held
// between its copies and its deletes while a file is closed, another
// created and a third removed; each must take effect under the new name.
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
	// A program working in d (its cwd, or a descriptor of it): its
	// creates and removals reach d without a lookup in d's parent, which
	// the kernel locks for the rename.
	d, err := os.Open(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
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
	// One at a time, each once the one before is held back by the rename
	// (as it must be) or made in the store under d/ (the bug): a removal
	// waiting in the mount holds d locked in the kernel, which a create
	// in d would wait for before it reaches the mount.
	changes := []func() error{
		func() error { return createAt(d, "g", "g") },
		func() error { return unix.Unlinkat(int(d.Fd()), "keep", 0) },
		f.Close,
	}
	closed := make(chan error, len(changes))
	for i, change := range changes {
		go func() { closed <- change() }()
		eventually(t, time.Minute, "the change to be held back or made", func() bool {
			return fusefs.HeldBackByRenames(fsys) == i+1 || st.changesAfter() >= i+1
		})
	}
	close(st.release)
	if err := <-renamed; err != nil {
		t.Fatalf("rename: %v", err)
	}
	for range changes {
		if err := <-closed; err != nil {
			t.Fatalf("a close, create or remove during the rename: %v", err)
		}
	}
	want := map[string]string{"e/f": "new", "e/g": "g"}
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

// createAt creates name in directory d with content.
func createAt(d *os.File, name, content string) error {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// heldDeletes holds the first Delete until release is closed, and counts
// the changes (puts, other deletes) made while it is held.
type heldDeletes struct {
	store.Store
	reached, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	held             bool
	changes          int
}

func (s *heldDeletes) Delete(ctx context.Context, key string) error {
	first := false
	s.once.Do(func() {
		first = true
		s.mu.Lock()
		s.held = true
		s.mu.Unlock()
		close(s.reached)
		<-s.release
	})
	if !first {
		s.count()
	}
	return s.Store.Delete(ctx, key)
}

func (s *heldDeletes) count() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.changes++
	}
}

func (s *heldDeletes) changesAfter() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes
}

func (s *heldDeletes) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	s.count()
	return s.Store.Put(ctx, key, r, size, meta)
}

func (s *heldDeletes) PutIfMatch(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	s.count()
	return s.Store.PutIfMatch(ctx, key, etag, r, size, meta)
}

// A rename over a file open with unsaved writes, while a flush of every
// file (a mounter's drain) waits for the rename, ends: the rename takes
// no file's lock while it holds back changes, and the replaced file's
// bytes are never uploaded over the renamed one.
// With a capacity too: counting the replaced file's size takes its lock
// before the rename holds changes back, not while.
func TestRenameOverADirtyOpenFileEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts fusefs.Options
	}{{"no quota", fusefs.Options{}}, {"quota", fusefs.Options{Capacity: 1 << 30}}} {
		t.Run(tc.name, func(t *testing.T) { renameOverADirtyOpenFile(t, tc.opts) })
	}
}

func renameOverADirtyOpenFile(t *testing.T, opts fusefs.Options) {
	st := &heldCopy{Store: memstore.New(), reached: make(chan struct{}), release: make(chan struct{})}
	put(t, st, "a", []byte("aaa"))
	put(t, st, "b", []byte("bbb"))
	fsys, dir := mountFSOf(t, st, opts)
	f, err := os.OpenFile(filepath.Join(dir, "b"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("X"), 1); err != nil {
		t.Fatal(err)
	}
	renamed := make(chan error, 1)
	go func() { renamed <- os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")) }()
	<-st.reached
	flushed := make(chan error, 1)
	go func() { flushed <- fsys.Flush(context.Background()) }()
	eventually(t, time.Minute, "the flush to be held back", func() bool { return fusefs.HeldBackByRenames(fsys) == 1 })
	close(st.release)
	select {
	case err := <-renamed:
		if err != nil {
			t.Fatalf("rename: %v", err)
		}
	case <-time.After(time.Minute):
		buf := make([]byte, 1<<20)
		t.Fatalf("the rename never ended:\n%s", buf[:runtime.Stack(buf, true)])
	}
	<-flushed // its error, if any, is the replaced file's: it has no name
	if got := string(stored(t, st, "b")); got != "aaa" {
		t.Fatalf("b holds %q, want the renamed file's content", got)
	}
}

// heldCopy holds the copy of a to b until release is closed.
type heldCopy struct {
	*memstore.Store
	reached, release chan struct{}
	once             sync.Once
}

func (s *heldCopy) Copy(ctx context.Context, src, etag, dst string, meta map[string]string) (store.Object, error) {
	if src == "a" && dst == "b" {
		s.once.Do(func() { close(s.reached); <-s.release })
	}
	return s.Store.Copy(ctx, src, etag, dst, meta)
}
