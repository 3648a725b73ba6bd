package fusefs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// Under the kernel's writeback cache, small write calls reach the mount
// as a few large WRITEs, and what a close returned for is stored. An
// append goes at the end, and a write into the middle of a page of a
// stored file through a write-only descriptor (the kernel reads the rest
// of the page first) keeps the bytes around it.
func TestWritebackCacheGathersSmallWrites(t *testing.T) {
	st := memstore.New()
	fsys, dir := mountFSOf(t, st, fusefs.Options{WritebackCache: true})
	path := filepath.Join(dir, "f")
	data := randomBytes(4 << 20)
	const call = 4096
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += call {
		if _, err := f.Write(data[off : off+call]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, st, "f"); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, not the %d written", len(got), len(data))
	}
	calls := int64(len(data) / call)
	if w := fsys.Stats().Writes.Load(); w == 0 || w > calls/16 {
		t.Fatalf("%d write calls reached the mount as %d WRITEs, want at most %d", calls, w, calls/16)
	}

	put(t, st, "g", bytes.Repeat([]byte("x"), 10000))
	g, err := os.OpenFile(filepath.Join(dir, "g"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("middle"), 5000); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("x"), 10000)
	copy(want[5000:], "middle")
	if got := stored(t, st, "g"); !bytes.Equal(got, want) {
		t.Fatalf("a write into a page through a write-only descriptor stored %q...", got[4990:5016])
	}

	a, err := os.OpenFile(filepath.Join(dir, "g"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"one", "two"} {
		if _, err := a.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, st, "g"); !bytes.Equal(got, append(want, "onetwo"...)) {
		t.Fatalf("appends stored %d bytes ending %q", len(got), got[max(0, len(got)-10):])
	}
}

// Under the writeback cache the kernel keeps its own size of an inode
// and ignores the mount's. A version another client wrote, longer or
// shorter, is read whole once the stat TTL has passed, never cut at the
// old size nor padded to it, and stat shows its size: its name gets a
// new inode. A descriptor opened on the old version reads that version
// or fails with ESTALE, never bytes of the new one.
func TestWritebackCacheGivesAnotherClientsVersionANewInode(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			opts := fusefs.Options{WritebackCache: true, StatTTL: 200 * time.Millisecond, ListTTL: 100 * time.Millisecond}
			dir := mountFS(t, st, opts)
			path := filepath.Join(dir, "f")
			v1 := randomBytes(20000)
			put(t, st, "f", v1)
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, v1) {
				t.Fatalf("first read: %v, v1 %v", err, bytes.Equal(got, v1))
			}
			old, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if _, err := old.ReadAt(make([]byte, len(v1)), 0); err != nil {
				t.Fatal(err)
			}
			prev := v1
			for _, size := range []int{50000, 7000} {
				next := randomBytes(size)
				put(t, st, "f", next)
				// Until the TTL passes the mount may show the version
				// before; never anything else.
				eventually(t, time.Minute, "the mount to read the new version", func() bool {
					got, err := os.ReadFile(path)
					switch {
					case errors.Is(err, syscall.ESTALE):
						t.Fatalf("a read by name failed with ESTALE: the kernel should have looked the name up again")
					case err != nil:
						t.Fatal(err)
					case bytes.Equal(got, next):
						return true
					case !bytes.Equal(got, prev):
						t.Fatalf("read %d bytes, neither the old version (%d) nor the new (%d), whole", len(got), len(prev), len(next))
					}
					return false
				})
				fi, err := os.Stat(path)
				if err != nil || fi.Size() != int64(size) {
					t.Fatalf("stat: %v, size %v, want %d", err, fi.Size(), size)
				}
				prev = next
			}
			got := make([]byte, len(v1))
			n, err := old.ReadAt(got, 0)
			if err != nil && !errors.Is(err, syscall.ESTALE) {
				t.Fatalf("the old descriptor: %v", err)
			}
			if err == nil && (n != len(v1) || !bytes.Equal(got, v1)) {
				t.Fatalf("the old descriptor read %d bytes, not v1", n)
			}
			if fi, err := old.Stat(); err != nil || fi.Size() != int64(len(v1)) {
				t.Fatalf("the old descriptor's stat: %v, size %d, want v1's %d", err, fi.Size(), len(v1))
			}
		})
	}
}

// A read that finds the file replaced by another client before the stat
// TTL passed fails with ESTALE under the writeback cache (the inode's
// size is the old version's, and the kernel keeps it); the next open by
// name reads the new version, although the kernel's entry for the name
// is still fresh: the open fails with ESTALE, and the kernel looks the
// name up again, and asks the store, not the listing it has.
func TestWritebackCacheOpenAfterAReadFoundTheFileReplaced(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			dir := mountFS(t, st, fusefs.Options{WritebackCache: true, StatTTL: time.Hour, ListTTL: time.Hour})
			path := filepath.Join(dir, "f")
			v1, v2 := randomBytes(20000), randomBytes(30000)
			put(t, st, "f", v1)
			// A listing the lookup again must not take the old version from.
			if _, err := os.ReadDir(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			put(t, st, "f", v2)
			if got, err := os.ReadFile(path); !errors.Is(err, syscall.ESTALE) {
				t.Fatalf("a read of a version replaced since the lookup: %v (%d bytes), want ESTALE", err, len(got))
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("the next open: %v, %d bytes, v2's %v", err, len(got), bytes.Equal(got, v2))
			}
		})
	}
}

// Under the writeback cache a write past the volume's capacity goes into
// the page cache; the kernel sends it at close, which fails with ENOSPC,
// and the store holds no more than the capacity.
func TestWritebackCacheTellsAFullVolumeAtClose(t *testing.T) {
	st := memstore.New()
	dir := mountFS(t, st, fusefs.Options{WritebackCache: true, Capacity: quotaMiB})
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := writeUntilFull(t, f, make([]byte, 64<<10), 2*quotaMiB); err != nil || n != 2*quotaMiB {
		t.Fatalf("writes into the page cache: %d bytes, %v", n, err)
	}
	if err := f.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close: %v, want ENOSPC", err)
	}
	if sum := storedSum(t, st); sum > quotaMiB {
		t.Fatalf("the store holds %d bytes, past the capacity %d", sum, quotaMiB)
	}
}

// A WRITE the capacity holds only part of fails whole under the
// writeback cache: the kernel heeds no short answer, and would drop the
// rest. The close fails, and no part of the file is stored as if whole.
func TestWritebackCacheFailsAWriteThatFitsInPart(t *testing.T) {
	st := memstore.New()
	put(t, st, "pre", make([]byte, 4096)) // the capacity is no longer a whole number of WRITEs
	dir := mountFS(t, st, fusefs.Options{WritebackCache: true, Capacity: quotaMiB})
	data := randomBytes(quotaMiB)
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatalf("a write into the page cache: %v", err)
	}
	if err := f.Close(); !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) {
		t.Fatalf("close: %v, want ENOSPC or EIO", err)
	}
	if got, err := st.Head(t.Context(), "f"); err == nil && got.Size != int64(len(data)) {
		t.Fatalf("the store holds %d of the %d bytes as f", got.Size, len(data))
	}
}

// After a WRITE of pages the kernel held failed, the kernel's size of
// the inode counts bytes the store never got. The name gets a new inode
// (with the store's size) at its next lookup, so that a later append goes
// at the store's end, not past a hole.
func TestWritebackCacheDropsAnInodeWhoseWriteFailed(t *testing.T) {
	st := memstore.New()
	put(t, st, "pre", make([]byte, quotaMiB-16<<10))
	put(t, st, "g", []byte("0123456789"))
	dir := mountFS(t, st, fusefs.Options{WritebackCache: true, Capacity: quotaMiB, StatTTL: 100 * time.Millisecond, ListTTL: 100 * time.Millisecond})
	path := filepath.Join(dir, "g")
	if got, err := os.ReadFile(path); err != nil || string(got) != "0123456789" {
		t.Fatalf("read: %q, %v", got, err)
	}
	if err := appendTo(path, make([]byte, 64<<10)); !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) {
		t.Fatalf("an append past the capacity: %v, want ENOSPC or EIO", err)
	}
	eventually(t, time.Minute, "the name to show the store's size", func() bool {
		fi, err := os.Stat(path)
		return err == nil && fi.Size() == 10
	})
	if err := appendTo(path, []byte("ab")); err != nil {
		t.Fatalf("an append that fits: %v", err)
	}
	if got := string(stored(t, st, "g")); got != "0123456789ab" {
		t.Fatalf("the store holds %q, want 0123456789ab", got)
	}
}
