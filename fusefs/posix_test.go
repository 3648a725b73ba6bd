package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
)

// TestPOSIX runs the same behaviour checks through a real FUSE mount on
// every backend: the in-memory store and a real MinIO server.
func TestPOSIX(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, st store.Store, dir string)
	}{
		{"small file round trip", testSmallFile},
		{"large file across parts", testLargeFile},
		{"overwrite with O_TRUNC", testOverwrite},
		{"O_TRUNC on a read-only open", testReadOnlyOpenTruncates},
		{"append", testAppend},
		{"random write", testRandomWrite},
		{"seek back after parts went up", testSeekBackAfterParts},
		{"truncate path", testTruncate},
		{"fsync uploads before close", testFsync},
		{"mkdir rmdir", testMkdirRmdir},
		{"empty dir survives remount", testEmptyDirRemount},
		{"unlink keeps implicit dir", testUnlinkKeepsDir},
		{"rename file", testRenameFile},
		{"rename dir", testRenameDir},
		{"rename errors", testRenameErrors},
		{"symlink", testSymlink},
		{"chmod chown mtime persist", testAttrsPersist},
		{"attributes changed after a listing", testAttrsChangedAfterListing},
		{"read after unlink", testReadAfterUnlink},
		{"read after unlink, too large to keep", testReadAfterUnlinkTooLarge},
		{"removed directory's attributes", testRemovedDirAttrs},
		{"hard link unsupported", testHardLink},
		{"odd keys", testOddKeys},
		{"large directory", testLargeDir},
		{"concurrent readers and writers", testConcurrent},
		{"statfs", testStatfs},
		{"read only", testReadOnly},
		{"mount options", testMountOptions},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					st := b.fresh(t)
					dir := mountFS(t, st, fusefs.Options{})
					c.run(t, st, dir)
				})
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes, want %d (first difference at %d)", what, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// remount mounts st again: what it shows came from the store alone.
func remount(t *testing.T, st store.Store) string {
	return mountFS(t, st, fusefs.Options{})
}

func testSmallFile(t *testing.T, st store.Store, dir string) {
	data := []byte("hello, objfuse\n")
	writeFile(t, filepath.Join(dir, "hello.txt"), data)
	sameBytes(t, "through the mount", readFile(t, filepath.Join(dir, "hello.txt")), data)
	sameBytes(t, "in the store", stored(t, st, "hello.txt"), data)
	fi, err := os.Stat(filepath.Join(dir, "hello.txt"))
	if err != nil || fi.Size() != int64(len(data)) || !fi.Mode().IsRegular() {
		t.Fatalf("stat: %v %v", fi, err)
	}
	// An empty file exists once it is closed.
	writeFile(t, filepath.Join(dir, "empty"), nil)
	if b := stored(t, st, "empty"); len(b) != 0 {
		t.Fatalf("empty file holds %d bytes", len(b))
	}
}

func testLargeFile(t *testing.T, st store.Store, dir string) {
	// Three and a bit 5 MiB parts, written in odd-sized chunks.
	data := randomBytes(3*5<<20 + 12345)
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 777_777)
		if _, err := f.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	sameBytes(t, "in the store", stored(t, st, "big"), data)
	sameBytes(t, "through the mount", readFile(t, filepath.Join(dir, "big")), data)
	// Random reads across part boundaries.
	f, err = os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int64{5<<20 - 10, 0, 10<<20 + 7, int64(len(data)) - 100, 1} {
		buf := make([]byte, 4096)
		n, err := f.ReadAt(buf, off)
		if err != nil && n != int(min(4096, int64(len(data))-off)) {
			t.Fatalf("read at %d: %d %v", off, n, err)
		}
		sameBytes(t, fmt.Sprintf("read at %d", off), buf[:n], data[off:off+int64(n)])
	}
}

func testOverwrite(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, []byte("a long first version"))
	writeFile(t, p, []byte("short"))
	sameBytes(t, "mount", readFile(t, p), []byte("short"))
	sameBytes(t, "store", stored(t, st, "f"), []byte("short"))
}

// Linux truncates a file opened O_RDONLY|O_TRUNC (the caller needs write
// permission) and, with FUSE's atomic O_TRUNC, leaves the truncation to
// the mount while setting its own size to 0: the store must agree.
func testReadOnlyOpenTruncates(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "t")
	writeFile(t, p, []byte("content that the open truncates"))
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "store", stored(t, st, "t"), nil)
	if fi, err := os.Stat(p); err != nil || fi.Size() != 0 {
		t.Fatalf("stat after O_RDONLY|O_TRUNC: %v, %v; want size 0", fi, err)
	}
}

func testAppend(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "log")
	writeFile(t, p, []byte("one\n"))
	for _, line := range []string{"two\n", "three\n"} {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := []byte("one\ntwo\nthree\n")
	sameBytes(t, "mount", readFile(t, p), want)
	sameBytes(t, "store", stored(t, st, "log"), want)
}

func testRandomWrite(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "r")
	data := randomBytes(1 << 20)
	writeFile(t, p, data)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte("PATCHED")
	for _, off := range []int64{100, 500_000, 1<<20 - 3} {
		if _, err := f.WriteAt(patch, off); err != nil {
			t.Fatal(err)
		}
		data = append(data[:off], append(patch, data[min(int(off)+len(patch), len(data)):]...)...)
	}
	// Read back through the same handle before closing.
	got := make([]byte, len(data))
	if n, err := f.ReadAt(got, 0); n != len(data) {
		t.Fatalf("read back: %d %v", n, err)
	}
	sameBytes(t, "before close", got, data)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "store", stored(t, st, "r"), data)
}

// testSeekBackAfterParts writes like zip does: sequentially past several
// parts, then back at the start to fill in a header.
func testSeekBackAfterParts(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "archive")
	data := randomBytes(12 << 20)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("HEADER"), 0); err != nil {
		t.Fatal(err)
	}
	copy(data, "HEADER")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "store", stored(t, st, "archive"), data)
}

func testTruncate(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "t")
	writeFile(t, p, []byte("0123456789"))
	if err := os.Truncate(p, 4); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "shrunk, store", stored(t, st, "t"), []byte("0123"))
	if err := os.Truncate(p, 6); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "grown, mount", readFile(t, p), []byte("0123\x00\x00"))
	sameBytes(t, "grown, store", stored(t, st, "t"), []byte("0123\x00\x00"))
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "emptied", stored(t, st, "t"), nil)
}

func testFsync(t *testing.T, st store.Store, dir string) {
	f, err := os.Create(filepath.Join(dir, "synced"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("durable")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "after fsync", stored(t, st, "synced"), []byte("durable"))
	f.WriteString(" and more")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "after second fsync", stored(t, st, "synced"), []byte("durable and more"))
}

func testMkdirRmdir(t *testing.T, st store.Store, dir string) {
	d := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(d, 0o750); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d, "f"), []byte("x"))
	wantErrno(t, "rmdir non-empty", os.Remove(d), syscall.ENOTEMPTY)
	if err := os.Remove(filepath.Join(d, "f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d); err != nil {
		t.Fatalf("rmdir empty: %v", err)
	}
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Fatalf("stat removed dir: %v", err)
	}
	wantErrno(t, "mkdir existing", os.Mkdir(filepath.Join(dir, "a"), 0o755), syscall.EEXIST)
	fi, err := os.Stat(filepath.Join(dir, "a"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("stat a: %v %v", fi, err)
	}
}

func testEmptyDirRemount(t *testing.T, st store.Store, dir string) {
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	again := remount(t, st)
	fi, err := os.Stat(filepath.Join(again, "empty"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("empty dir after remount: %v %v", fi, err)
	}
}

func testUnlinkKeepsDir(t *testing.T, st store.Store, dir string) {
	put(t, st, "implicit/only", []byte("x")) // no marker for implicit/
	if err := os.Remove(filepath.Join(dir, "implicit", "only")); err != nil {
		t.Fatal(err)
	}
	again := remount(t, st)
	if fi, err := os.Stat(filepath.Join(again, "implicit")); err != nil || !fi.IsDir() {
		t.Fatalf("dir gone with its last file: %v %v", fi, err)
	}
}

func testRenameFile(t *testing.T, st store.Store, dir string) {
	writeFile(t, filepath.Join(dir, "old"), []byte("content"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if err := os.Rename(filepath.Join(dir, "old"), filepath.Join(dir, "sub", "new")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old")); !os.IsNotExist(err) {
		t.Fatalf("old name still there: %v", err)
	}
	sameBytes(t, "new name", readFile(t, filepath.Join(dir, "sub", "new")), []byte("content"))
	sameBytes(t, "store", stored(t, st, "sub/new"), []byte("content"))
	if _, err := st.Head(context.Background(), "old"); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("old object: %v", err)
	}
	// Rename over an existing file replaces it.
	writeFile(t, filepath.Join(dir, "other"), []byte("other"))
	if err := os.Rename(filepath.Join(dir, "other"), filepath.Join(dir, "sub", "new")); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "replaced", readFile(t, filepath.Join(dir, "sub", "new")), []byte("other"))
	// A file still open for writing is uploaded before it moves.
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("pending")
	if err := os.Rename(filepath.Join(dir, "open"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sameBytes(t, "moved while open", stored(t, st, "moved"), []byte("pending"))
}

func testRenameDir(t *testing.T, st store.Store, dir string) {
	os.MkdirAll(filepath.Join(dir, "d", "deep", "er"), 0o755)
	writeFile(t, filepath.Join(dir, "d", "f1"), []byte("1"))
	writeFile(t, filepath.Join(dir, "d", "deep", "f2"), []byte("2"))
	put(t, st, "d/implicit/f3", []byte("3"))
	if err := os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "e")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"e/f1": "1", "e/deep/f2": "2", "e/implicit/f3": "3"} {
		sameBytes(t, path, readFile(t, filepath.Join(dir, path)), []byte(want))
	}
	if fi, err := os.Stat(filepath.Join(dir, "e", "deep", "er")); err != nil || !fi.IsDir() {
		t.Fatalf("empty subdir: %v %v", fi, err)
	}
	var left []string
	for e, err := range st.List(context.Background(), "d/", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, e.Key)
	}
	if len(left) > 0 {
		t.Fatalf("objects left under the old name: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); !os.IsNotExist(err) {
		t.Fatalf("old dir: %v", err)
	}
}

func testRenameErrors(t *testing.T, st store.Store, dir string) {
	os.MkdirAll(filepath.Join(dir, "full", "x"), 0o755)
	os.Mkdir(filepath.Join(dir, "src"), 0o755)
	writeFile(t, filepath.Join(dir, "file"), []byte("f"))
	wantErrno(t, "dir over non-empty dir", syscall.Rename(filepath.Join(dir, "src"), filepath.Join(dir, "full")), syscall.ENOTEMPTY)
	wantErrno(t, "file over dir", syscall.Rename(filepath.Join(dir, "file"), filepath.Join(dir, "src")), syscall.EISDIR)
	wantErrno(t, "dir over file", os.Rename(filepath.Join(dir, "src"), filepath.Join(dir, "file")), syscall.ENOTDIR)
	wantErrno(t, "missing source", os.Rename(filepath.Join(dir, "nope"), filepath.Join(dir, "x")), syscall.ENOENT)
	err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "file"), unix.AT_FDCWD, filepath.Join(dir, "full", "x"), unix.RENAME_NOREPLACE)
	wantErrno(t, "RENAME_NOREPLACE", err, syscall.EEXIST)
}

func testSymlink(t *testing.T, st store.Store, dir string) {
	if err := os.Symlink("../target/path", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	again := remount(t, st)
	for _, d := range []string{dir, again} {
		got, err := os.Readlink(filepath.Join(d, "link"))
		if err != nil || got != "../target/path" {
			t.Fatalf("readlink: %q %v", got, err)
		}
		fi, err := os.Lstat(filepath.Join(d, "link"))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("lstat: %v %v", fi, err)
		}
	}
	entries, err := os.ReadDir(again)
	if err != nil || len(entries) != 1 || entries[0].Type() != os.ModeSymlink {
		t.Fatalf("readdir shows %v %v", entries, err)
	}
}

func testAttrsPersist(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, []byte("x"))
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	mtime := time.Date(2020, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, path := range []string{p, filepath.Join(dir, "d")} {
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 1234, 5678); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	o, err := st.Head(context.Background(), "f")
	if err != nil {
		t.Fatal(err)
	}
	if o.Metadata["mode"] != "33184" || o.Metadata["uid"] != "1234" || o.Metadata["gid"] != "5678" || o.Metadata["mtime"] != "1580702706" {
		t.Fatalf("s3fs metadata: %v", o.Metadata)
	}
	again := remount(t, st)
	for _, name := range []string{"f", "d"} {
		fi, err := os.Stat(filepath.Join(again, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o640 || sys.Uid != 1234 || sys.Gid != 5678 || !fi.ModTime().Equal(mtime) {
			t.Fatalf("%s after remount: mode %v uid %d gid %d mtime %v", name, fi.Mode(), sys.Uid, sys.Gid, fi.ModTime())
		}
	}
	// Content survives a chmod.
	sameBytes(t, "content", readFile(t, filepath.Join(again, "f")), []byte("x"))
}

// testAttrsChangedAfterListing: a change of attributes outlives the
// listing taken before it. With the kernel's entries short-lived and
// listings long-lived, every stat after the change looks the name up
// again in that listing; it must not bring the old attributes back (nor
// must the next upload of the file store them).
func testAttrsChangedAfterListing(t *testing.T, st store.Store, _ string) {
	dir := mountFS(t, st, fusefs.Options{StatTTL: time.Millisecond, ListTTL: time.Minute})
	writeFile(t, filepath.Join(dir, "f"), []byte("x"))
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	listNames(t, dir) // the listing the lookups below answer from
	for _, name := range []string{"f", "d"} {
		if err := os.Chmod(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(dir, "l"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	check := func(root, when string) {
		t.Helper()
		for _, name := range []string{"f", "d"} {
			if fi, err := os.Lstat(filepath.Join(root, name)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("%s: %s is %s, want mode 0700", when, name, statText(fi, err))
			}
		}
		fi, err := os.Lstat(filepath.Join(root, "l"))
		if err != nil {
			t.Fatalf("%s: the symlink: %v", when, err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 1234 || fi.Size() != 1 {
			t.Fatalf("%s: the symlink's owner is %d and size %d, want 1234 and 1", when, uid, fi.Size())
		}
	}
	// Each round outlives the kernel's entries (1 ms), not the listing.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		check(dir, "after the change")
	}
	f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	check(remount(t, st), "after an append and a remount")
}

func testReadAfterUnlink(t *testing.T, st store.Store, dir string) {
	p := filepath.Join(dir, "doomed")
	writeFile(t, p, []byte("still here"))
	f := openThenRemove(t, p)
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat after unlink: %v", err)
	}
	b := make([]byte, 100)
	n, err := f.ReadAt(b, 0)
	if n != 10 {
		t.Fatalf("read after unlink: %d %v", n, err)
	}
	sameBytes(t, "read after unlink", b[:n], []byte("still here"))
}

// openThenRemove opens the file at p and removes it; the test's end
// closes it.
func openThenRemove(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	return f
}

// testReadAfterUnlinkTooLarge: an open file too large to keep a local
// copy of when it is removed cannot be read any more, and says so
// (ESTALE) rather than reading as empty or as some other object.
func testReadAfterUnlinkTooLarge(t *testing.T, st store.Store, _ string) {
	dir := mountFS(t, st, fusefs.Options{Prefix: "vol", StagingLimit: 4 << 20})
	p := filepath.Join(dir, "big")
	data := randomBytes(2 << 20) // over a quarter of the staging limit
	writeFile(t, p, data)
	got := make([]byte, 4096)
	n, err := openThenRemove(t, p).ReadAt(got, 0)
	if writebackMounts && err == nil {
		// The writes went through the kernel's pages, which it keeps:
		// they answer the read, and they are the file's bytes.
		sameBytes(t, "read after unlink from the kernel's pages", got[:n], data[:4096])
		return
	}
	wantErrno(t, fmt.Sprintf("read after unlink (%d bytes)", n), err, syscall.ESTALE)
}

// testRemovedDirAttrs: a removed directory still open takes fchmod (as
// on a local disk) and stores it nowhere: it has no key, and the one
// made up for it must not be the mount's own prefix.
func testRemovedDirAttrs(t *testing.T, st store.Store, _ string) {
	dir := mountFS(t, st, fusefs.Options{Prefix: "vol"})
	if err := os.Mkdir(filepath.Join(dir, "gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "gone"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Rmdir(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := f.Chmod(0o700); err != nil {
		t.Fatalf("fchmod of a removed directory: %v", err)
	}
	for e, err := range st.List(context.Background(), "", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("S3 holds %q (mode %s) after the directory was removed", e.Key, e.Metadata["mode"])
	}
}

func testHardLink(t *testing.T, st store.Store, dir string) {
	writeFile(t, filepath.Join(dir, "f"), []byte("x"))
	wantErrno(t, "link", os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "g")), syscall.ENOTSUP)
}

// testOddKeys: keys that cannot be file names are hidden, never mapped
// outside the mount, and never break the names around them.
func testOddKeys(t *testing.T, st store.Store, dir string) {
	long := strings.Repeat("x", 300)
	kept := map[string]bool{}
	for _, k := range []string{"a//b", "../x", "./y", long, "ok/" + long, "d", "d/e", "plain", "/leading"} {
		// MinIO itself refuses some of these keys; AWS S3 takes them all.
		_, err := st.Put(context.Background(), k, strings.NewReader(k), int64(len(k)), nil)
		switch {
		case err == nil:
			kept[k] = true
		case !errors.Is(err, store.ErrInvalid):
			t.Fatalf("put %q: %v", k, err)
		}
	}
	names := func(d string) []string { return listNames(t, d) }
	// Root shows a (from a//b, but b is hidden), d as a directory, ok,
	// plain; "..", ".", the long name and the empty segment are hidden.
	want := []string{"d", "plain"}
	if kept["a//b"] {
		want = append(want, "a")
	}
	// A server that keeps objects as files (versitygw) may leave the
	// directory of a key it refused.
	okListed := false
	for e := range st.List(context.Background(), "", "", false) {
		okListed = okListed || e.Name() == "ok/"
	}
	if okListed {
		want = append(want, "ok")
	}
	if _, err := st.Head(context.Background(), "leading"); err == nil {
		want = append(want, "leading") // MinIO strips the leading slash
	}
	if _, err := st.Head(context.Background(), "y"); err == nil {
		want = append(want, "y") // versitygw cleans "./y" to "y"
	}
	slices.Sort(want)
	if got := names(dir); !slices.Equal(got, want) {
		t.Fatalf("root shows %v, want %v (stored: %v)", got, want, kept)
	}
	// versitygw cleans "a//b" to "a/b": only a key kept with its empty
	// segment must stay hidden.
	emptySegment := false
	for e := range st.List(context.Background(), "a/", "", true) {
		emptySegment = emptySegment || e.Key == "a//b"
	}
	if emptySegment {
		if got := names(filepath.Join(dir, "a")); len(got) != 0 {
			t.Fatalf("a shows %v, want nothing (its only key has an empty segment)", got)
		}
	}
	if okListed {
		if got := names(filepath.Join(dir, "ok")); len(got) != 0 {
			t.Fatalf("ok shows %v", got)
		}
	}
	// Both "d" and "d/e": the directory wins (MinIO keeps only "d").
	bothStored := false
	for e := range st.List(context.Background(), "d/", "", false) {
		bothStored = bothStored || e.Key == "d/e"
	}
	fi, err := os.Stat(filepath.Join(dir, "d"))
	switch {
	case err != nil:
		t.Fatal(err)
	case bothStored && !fi.IsDir():
		t.Fatalf("d should be the directory: %v", fi.Mode())
	case bothStored:
		sameBytes(t, "d/e", readFile(t, filepath.Join(dir, "d", "e")), []byte("d/e"))
	default:
		sameBytes(t, "d", readFile(t, filepath.Join(dir, "d")), []byte("d"))
	}
	if _, err := os.Stat(filepath.Join(dir, long)); err == nil {
		t.Fatal("300-byte name is visible")
	}
	sameBytes(t, "plain", readFile(t, filepath.Join(dir, "plain")), []byte("plain"))
	// Nothing resolves outside the mount: the parent of the mount's root
	// is the real parent directory.
	if p, _ := filepath.EvalSymlinks(filepath.Join(dir, "..")); p != filepath.Dir(dir) {
		t.Fatalf(".. of the root is %s", p)
	}
}

func testLargeDir(t *testing.T, st store.Store, dir string) {
	const n = 10_000
	var wg sync.WaitGroup
	keys := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				put(t, st, fmt.Sprintf("big/f%05d", i), []byte{byte(i)})
			}
		}()
	}
	for i := range n {
		keys <- i
	}
	close(keys)
	wg.Wait()
	entries, err := os.ReadDir(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Fatalf("readdir: %d entries, want %d", len(entries), n)
	}
	for i, e := range entries {
		if want := fmt.Sprintf("f%05d", i); e.Name() != want {
			t.Fatalf("entry %d is %s, want %s", i, e.Name(), want)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "big", "f09999"))
	if err != nil || fi.Size() != 1 {
		t.Fatalf("stat: %v %v", fi, err)
	}
}

func testConcurrent(t *testing.T, st store.Store, dir string) {
	const writers = 8
	data := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 300_000+i) }
	var wg sync.WaitGroup
	errs := make(chan error, 4*writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("w%d", i)), data(i), 0o644); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	for i := range writers {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%d", i)))
				if err != nil {
					errs <- err
				} else if !bytes.Equal(b, data(i)) {
					errs <- fmt.Errorf("w%d: wrong content", i)
				}
			}()
		}
		// A writer replaces a file while others read different ones.
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("n%d", i)), data(i), 0o644); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range writers {
		sameBytes(t, "store", stored(t, st, fmt.Sprintf("n%d", i)), data(i))
	}
}

func testStatfs(t *testing.T, st store.Store, dir string) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	if s.Bavail == 0 || s.Namelen != 255 {
		t.Fatalf("statfs: %+v", s)
	}
}

func testReadOnly(t *testing.T, st store.Store, dir string) {
	put(t, st, "f", []byte("x"))
	ro := mountFS(t, st, fusefs.Options{ReadOnly: true})
	sameBytes(t, "read", readFile(t, filepath.Join(ro, "f")), []byte("x"))
	wantErrno(t, "write", os.WriteFile(filepath.Join(ro, "g"), []byte("y"), 0o644), syscall.EROFS)
	wantErrno(t, "truncate", os.Truncate(filepath.Join(ro, "f"), 0), syscall.EROFS)
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(ro, "d"), 0o755), syscall.EROFS)
	wantErrno(t, "unlink", os.Remove(filepath.Join(ro, "f")), syscall.EROFS)
}

func testMountOptions(t *testing.T, st store.Store, dir string) {
	put(t, st, "plain", []byte("x"))
	put(t, st, "sub/f", []byte("y"))
	m := mountFS(t, st, fusefs.Options{UID: 1000, GID: 2000, FileMode: 0o600, DirMode: 0o700})
	for name, want := range map[string]os.FileMode{"plain": 0o600, "sub": os.ModeDir | 0o700} {
		fi, err := os.Stat(filepath.Join(m, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != want || sys.Uid != 1000 || sys.Gid != 2000 {
			t.Fatalf("%s: mode %v uid %d gid %d", name, fi.Mode(), sys.Uid, sys.Gid)
		}
	}
	// A prefix mount shows only what lies below the prefix.
	pm := mountFS(t, st, fusefs.Options{Prefix: "sub"})
	entries, err := os.ReadDir(pm)
	if err != nil || len(entries) != 1 || entries[0].Name() != "f" {
		t.Fatalf("prefix mount shows %v %v", entries, err)
	}
}

// os.Rename refuses any existing directory as the target by itself;
// the checks above use rename(2) directly to reach the filesystem.
