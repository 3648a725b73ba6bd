package fusefs_test

import (
	"bytes"
	"context"
	"encoding/binary"
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

	"golang.org/x/sys/unix"

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
// between them ("d.txt" lies between "d" and "d/"). The listing may hand
// out the file before the directory turns up (under load, the kernel can
// read that far first): the name is listed once, and then is the
// directory.
func TestReaddirDirectoryWinsOverFileOfSameName(t *testing.T) {
	mem := memstore.New()
	for _, k := range []string{"d", "d-1", "d.txt", "d/x", "e", "e/", "f", "g/h"} {
		put(t, mem, k, []byte(k))
	}
	dir := mountFS(t, mem, fusefs.Options{})
	names := listNames(t, dir)
	want := map[string]bool{"d": true, "d-1": false, "d.txt": false, "e": true, "f": false, "g": true}
	if !slices.Equal(names, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("root lists %v, want each of %v once", names, slices.Sorted(maps.Keys(want)))
	}
	for name, isDir := range want {
		eventually(t, 5*time.Second, name+" to have its kind", func() bool {
			fi, err := os.Stat(filepath.Join(dir, name))
			return err == nil && fi.IsDir() == isDir
		})
	}
}

// minioOrderStore yields each page of a listing as minio-go does: the
// page's objects first, then its prefixes.
type minioOrderStore struct {
	store.Store
	page int
}

func (s *minioOrderStore) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		var objects, prefixes []store.Entry
		flush := func() bool {
			for _, e := range append(objects, prefixes...) {
				if !yield(e, nil) {
					return false
				}
			}
			objects, prefixes = nil, nil
			return true
		}
		for e, err := range s.Store.List(ctx, prefix, startAfter, recursive) {
			if err != nil {
				yield(e, err)
				return
			}
			if e.IsPrefix() {
				prefixes = append(prefixes, e)
			} else {
				objects = append(objects, e)
			}
			if len(objects)+len(prefixes) == s.page && !flush() {
				return
			}
		}
		flush()
	}
}

// With minio-go's order a file "d" arrives before the prefix "d/" that
// hides it: the directory is listed once and wins.
func TestReaddirDirectoryWinsInMinioGoOrder(t *testing.T) {
	for _, page := range []int{2, 3, 1000} {
		t.Run(fmt.Sprintf("page%d", page), func(t *testing.T) {
			mem := memstore.New()
			for _, k := range []string{"d", "d-1", "d/x", "e"} {
				put(t, mem, k, []byte(k))
			}
			dir := mountFS(t, &minioOrderStore{Store: mem, page: page}, fusefs.Options{})
			names := listNames(t, dir)
			if !slices.Equal(names, []string{"d", "d-1", "e"}) {
				t.Fatalf("root lists %v", names)
			}
			eventually(t, 5*time.Second, "d to be the directory", func() bool {
				fi, err := os.Stat(filepath.Join(dir, "d"))
				return err == nil && fi.IsDir()
			})
			if got := string(readFile(t, filepath.Join(dir, "d", "x"))); got != "d/x" {
				t.Fatalf("d/x reads %q", got)
			}
		})
	}
}

// A second listing served from the cache while a file is open lists the
// file once.
func TestReaddirFromCacheWithOpenFile(t *testing.T) {
	mem := memstore.New()
	put(t, mem, "a", []byte("a"))
	put(t, mem, "b", []byte("b"))
	dir := mountFS(t, mem, fusefs.Options{ListTTL: time.Hour, StatTTL: time.Hour})
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("listed %v with a open", entries)
	}
}

// A file removed through the mount while its directory's listing is on its
// way is not brought back by that listing.
func TestUnlinkDuringListingStaysUnlinked(t *testing.T) {
	mem := memstore.New()
	for _, k := range []string{"big/a", "big/b", "big/c"} {
		put(t, mem, k, []byte(k))
	}
	st := &pausedListStore{Store: mem, prefix: "big/", before: 1, resume: make(chan struct{})}
	dir := mountFS(t, st, fusefs.Options{ListTTL: time.Hour, StatTTL: time.Hour})
	d, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	first, err := d.Readdirnames(1)
	if err != nil || len(first) != 1 || first[0] != "a" {
		t.Fatalf("first entry: %v, %v", first, err)
	}
	if err := os.Remove(filepath.Join(dir, "big", "c")); err != nil {
		t.Fatal(err)
	}
	close(st.resume)
	rest, err := d.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rest, "c") {
		t.Fatalf("the listing brought back the removed file: %v", rest)
	}
	if _, err := os.Stat(filepath.Join(dir, "big", "c")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of the removed file: %v", err)
	}
}

// listNames is a directory's entry names, sorted (os.ReadDir sorts).
func listNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestSeekingBackPastTheWindow: an open directory keeps a window of its
// listing, not all of it. A seek (seekdir, or the kernel asking again
// from where a reader's buffer ran out) inside the window is served from
// it; one back before it lists the directory again, and the reader gets
// the same names from there on. (Each case reads on to the end.)
func TestSeekingBackPastTheWindow(t *testing.T) {
	const total = 12_000 // past the window: 4,096 ahead and up to 2,048 behind
	mem := memstore.New()
	for i := range total {
		put(t, mem, fmt.Sprintf("big/f%05d", i), nil)
	}
	st := &countingStore{Store: mem}
	dir := mountFS(t, st, fusefs.Options{ListTTL: time.Nanosecond})
	fd, err := unix.Open(filepath.Join(dir, "big"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	all := readDirents(t, fd)
	if len(all) != total {
		t.Fatalf("listed %d entries, want %d", len(all), total)
	}
	for _, c := range []struct {
		name   string
		after  int // the entry whose offset is sought
		relist bool
	}{
		{"inside the window", total - 100, false},
		{"back past it", 10, true},
		{"back a thousand", total - 1000, false},
		{"to the start", -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			off := int64(0)
			if c.after >= 0 {
				off = all[c.after].off
			}
			lists := st.lists.Load()
			if _, err := unix.Seek(fd, off, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			got := readDirents(t, fd)
			want := all[c.after+1:]
			if len(got) != len(want) {
				t.Fatalf("after seeking to %d: %d entries, want %d from %q", off, len(got), len(want), want[0].name)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("entry %d after the seek: %+v, want %+v", i, got[i], want[i])
				}
			}
			if relisted := st.lists.Load() > lists; relisted != c.relist {
				t.Errorf("listed again: %v, want %v", relisted, c.relist)
			}
		})
	}
}

// dirent is a name getdents returned, with the offset that seeks past it.
type dirent struct {
	name string
	off  int64
}

// readDirents reads fd's entries with getdents from where it stands to
// its end, a small buffer at a time (as the kernel asks again from where
// a reader's buffer ran out), without "." and "..".
func readDirents(t *testing.T, fd int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, 2048)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino, off, reclen, type, name.
			off := int64(binary.NativeEndian.Uint64(b[8:16]))
			reclen := binary.NativeEndian.Uint16(b[16:18])
			name, _, _ := bytes.Cut(b[19:reclen], []byte{0})
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{s, off})
			}
			b = b[reclen:]
		}
	}
}

// TestARecreatedNameIsListedOnce: a file removed and created again while
// a long listing is read (its window held back) is not stored yet when
// the listing ends; it was listed already and is not added again.
func TestARecreatedNameIsListedOnce(t *testing.T) {
	const total = 10_000 // past the window, so the listing is still under way
	mem := memstore.New()
	for i := range total {
		put(t, mem, fmt.Sprintf("big/f%05d", i), nil)
	}
	dir := mountFS(t, mem, fusefs.Options{})
	d, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	first, err := d.Readdirnames(100)
	if err != nil || len(first) != 100 || first[0] != "f00000" {
		t.Fatalf("the first names: %v, %v", first, err)
	}
	if err := os.Remove(filepath.Join(dir, "big", "f00000")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "big", "f00000")) // open: not stored yet
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rest, err := d.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(first) + len(rest); n != total || slices.Contains(rest, "f00000") {
		t.Fatalf("listed %d names, want %d; f00000 again at the end: %v", n, total, slices.Contains(rest, "f00000"))
	}
}
