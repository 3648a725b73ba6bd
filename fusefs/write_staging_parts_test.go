package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// stagedPart is the part size of these tests: S3's least.
const stagedPart = 5 << 20

// stagedWriter opens name for writing (flag adds to O_WRONLY) on a mount
// whose WRITEs are the test's write calls (no writeback cache), and
// returns a function that writes p at off through it.
func stagedWriter(t *testing.T, st store.Store, name string, flag int) (*fusefs.FS, string, *os.File, func(p []byte, off int)) {
	t.Helper()
	fsys, dir := mountFSAsIs(t, st, fusefs.Options{PartSize: stagedPart, Concurrency: 2, StatTTL: time.Hour, ListTTL: time.Hour})
	h, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return fsys, dir, h, func(p []byte, off int) {
		t.Helper()
		if _, err := h.WriteAt(p, int64(off)); err != nil {
			t.Fatalf("write %d bytes at %d: %v", len(p), off, err)
		}
	}
}

// earlyParts waits until n parts went up before the close.
func earlyParts(t *testing.T, fsys *fusefs.FS, n int64) {
	t.Helper()
	eventually(t, time.Minute, "parts uploaded while the file is written", func() bool {
		return fsys.Stats().EarlyParts.Load() >= n
	})
	if got := fsys.Stats().EarlyParts.Load(); got != n {
		t.Fatalf("%d parts went up early, want %d", got, n)
	}
}

// noUploadsLeft checks that no multipart upload is left in a MinIO bucket.
func noUploadsLeft(t *testing.T, st store.Store) {
	t.Helper()
	s3, ok := st.(*s3store.Store)
	if !ok {
		return
	}
	eventually(t, time.Minute, "no multipart upload left", func() bool {
		for u := range s3.Client().ListIncompleteUploads(t.Context(), s3.Bucket(), "", true) {
			if u.Err == nil {
				return false
			}
		}
		return true
	})
}

// A file staged on disk (here: written out of order) uploads each part as
// soon as its writers wrote it whole, before the close, which sends what
// is left and completes the upload. Nothing is visible before the close.
// A part changed after it went up is sent again: the object is what was
// written last.
func TestStagedPartsGoUpWhileTheFileIsWritten(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			fsys, _, h, write := stagedWriter(t, st, "f", os.O_CREATE)
			want := randomBytes(3*stagedPart + 1<<20)
			write(want[stagedPart:2*stagedPart], stagedPart) // not where the file ends: staged
			write(want[:stagedPart], 0)
			write(want[2*stagedPart:], 2*stagedPart) // one more whole part, and a partial one
			earlyParts(t, fsys, 3)
			if _, err := st.Head(t.Context(), "f"); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("the object before the close: %v, want none", err)
			}
			change := randomBytes(4096)
			copy(want[100:], change)
			write(change, 100) // into the first part, which went up
			if err := h.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			sameBytes(t, "stored", stored(t, st, "f"), want)
			if n := fsys.Stats().UnorderedSpills.Load(); n != 1 {
				t.Errorf("%d spills to staging, want 1", n)
			}
			noUploadsLeft(t, st)
		})
	}
}

// A truncate below parts that went up early, a rename while they went
// up: what is stored is the file as it is at the close, under its name
// then, and no upload is left behind.
func TestStagedPartsFollowTruncatesAndRenames(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			fsys, dir, h, write := stagedWriter(t, st, "a", os.O_CREATE)
			want := randomBytes(3 * stagedPart)
			write(want[stagedPart:], stagedPart)
			write(want[:stagedPart], 0)
			earlyParts(t, fsys, 3)
			if err := h.Truncate(stagedPart + 1000); err != nil {
				t.Fatal(err)
			}
			want = want[:stagedPart+1000]
			if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
				t.Fatal(err)
			}
			tail := randomBytes(2 * stagedPart)
			write(tail, stagedPart) // two parts whole again, under the new name
			want = append(want[:stagedPart], tail...)
			earlyParts(t, fsys, 5)
			if err := h.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			sameBytes(t, "stored", stored(t, st, "b"), want)
			if _, err := st.Head(t.Context(), "a"); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("the old name after the close: %v, want none", err)
			}
			noUploadsLeft(t, st)
		})
	}
}

// A change in place whose parts went up early, to a file another client
// replaced meanwhile, does not overwrite that client's version: the
// upload completes only on the version the change was made to, as a
// whole upload does (TestWriteConflictKeepsBothVersions), and the change
// is kept under a conflict name.
func TestStagedPartsNeverOverwriteAnotherWriter(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			old := randomBytes(2*stagedPart + 1<<20)
			put(t, st, "f", old)
			fsys, _, h, write := stagedWriter(t, st, "f", 0)
			mine := randomBytes(2 * stagedPart)
			write(mine, 0) // the copy is loaded, and both its parts rewritten
			earlyParts(t, fsys, 2)
			theirs := []byte("the other writer's")
			put(t, st, "f", theirs)
			if err := h.Close(); !errors.Is(err, syscall.EIO) {
				t.Fatalf("close of the losing change: %v, want EIO", err)
			}
			if got := stored(t, st, "f"); string(got) != string(theirs) {
				t.Fatalf("f holds %d bytes: the other writer's version was overwritten", len(got))
			}
			kept := theConflictCopy(t, st, "f")
			sameBytes(t, "the conflict copy", stored(t, st, kept), append(mine, old[len(mine):]...))
			noUploadsLeft(t, st)
		})
	}
}

// Under the writeback cache the kernel keeps a file's mtime and sends it
// (mtime and ctime, naming the open file) as it writes pages back and
// before the close: a time within the writing, which the upload records
// anyway. It costs a file stored in parts no copy of the object onto
// itself (which would double what storing a large file costs). A time a
// program sets, even one within the writing (touch -m -d), is stored.
func TestWritebackWriteTimesCostNoCopy(t *testing.T) {
	mem := memstore.New()
	var copies atomic.Int64
	mem.FailWith = func(op, key string) error {
		if op == "copy" {
			copies.Add(1)
		}
		return nil
	}
	_, dir := mountFSOf(t, mem, fusefs.Options{WritebackCache: true, PartSize: stagedPart})
	path := filepath.Join(dir, "f")
	storedMtime := func() int64 {
		t.Helper()
		o, err := mem.Head(t.Context(), "f")
		if err != nil {
			t.Fatal(err)
		}
		got, err := strconv.ParseFloat(o.Metadata["mtime"], 64)
		if err != nil {
			t.Fatalf("stored mtime %q: %v", o.Metadata["mtime"], err)
		}
		return int64(got)
	}
	// write writes two parts and has the kernel send them now, not at
	// the close, so that the upload begins (and fixes its metadata) now;
	// then, in a later second, it writes a third part and calls then.
	write := func(then func()) []byte {
		t.Helper()
		h, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		data := randomBytes(3*stagedPart + 12345)
		// The second part first: the file is staged, whatever order
		// the kernel sends each part's pages in.
		for _, off := range []int{stagedPart, 0} {
			if _, err := h.WriteAt(data[off:off+stagedPart], int64(off)); err != nil {
				t.Fatal(err)
			}
			const all = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			if err := unix.SyncFileRange(int(h.Fd()), int64(off), stagedPart, all); err != nil {
				t.Fatal(err)
			}
		}
		sent := time.Now().Unix()
		eventually(t, 3*time.Second, "a later second", func() bool { return time.Now().Unix() > sent })
		if _, err := h.WriteAt(data[2*stagedPart:], 2*stagedPart); err != nil {
			t.Fatal(err)
		}
		then()
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "stored", stored(t, mem, "f"), data)
		return data
	}

	began := time.Now().Unix()
	write(func() {})
	if n := copies.Load(); n != 0 {
		t.Fatalf("storing the file copied an object %d times: the kernel's time was taken as set", n)
	}
	if got, closed := storedMtime(), time.Now().Unix(); got < began-1 || got > closed+1 {
		t.Fatalf("stored mtime %d, not within the writing (%d to %d)", got, began, closed)
	}

	var set time.Time
	write(func() {
		set = time.Now() // within the writing, a second after its upload began
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(set.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, 0); err != nil {
			t.Fatal(err)
		}
	})
	if got := storedMtime(); got != set.Unix() {
		t.Fatalf("stored mtime %d, want the one set, %d", got, set.Unix())
	}
}
