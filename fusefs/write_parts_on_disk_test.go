package fusefs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A memory limit too small for Concurrency parts uploading and one being
// filled: two 5 MiB parts against the three (two in flight, one filling)
// that Concurrency 2 streams with. Staging has room for those three in
// half of it.
const (
	diskPart = 5 << 20
	diskMiB  = 1 << 20
)

func partsOnDiskOptions() fusefs.Options {
	return fusefs.Options{MemoryLimit: 2 * diskPart, PartSize: diskPart, Concurrency: 2}
}

// writeMiBs writes data to h in writes of a MiB, calling after (if not
// nil) after each one.
func writeMiBs(t *testing.T, h *os.File, data []byte, after func()) {
	t.Helper()
	for off := 0; off < len(data); off += diskMiB {
		if _, err := h.Write(data[off:min(off+diskMiB, len(data))]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
		if after != nil {
			after()
		}
	}
}

// TestASmallMemoryLimitFillsPartsOnDisk: under a memory limit that cannot
// keep Concurrency parts uploading while the next fills, a file streams
// its parts through spool files in the staging area, not part buffers:
// no part buffer is ever mapped, staging holds no more than the parts in
// flight and the one being filled, the object is stored in parts, whole,
// and nothing is left staged once the file is closed.
func TestASmallMemoryLimitFillsPartsOnDisk(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			f, dir := mountFSOf(t, st, partsOnDiskOptions())
			h, err := os.Create(filepath.Join(dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			const parts = 9
			data := randomBytes(parts*diskPart - 123)
			var peak int64
			writeMiBs(t, h, data, func() {
				if n := fusefs.PartBufferBytes(f); n != 0 {
					t.Fatalf("%d bytes of part buffers mapped: the parts fill in memory", n)
				}
				peak = max(peak, fusefs.StagedBytes(f))
			})
			if err := h.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if peak == 0 || peak > 3*diskPart {
				t.Errorf("staging took up to %d bytes while the file was written; want some, and at most 3 parts (%d)", peak, 3*diskPart)
			}
			sameBytes(t, "stored", stored(t, st, "big"), data)
			if n := fusefs.StagedBytes(f); n != 0 {
				t.Errorf("staging files still take %d bytes after close", n)
			}
			storedInParts(t, st, "big", parts)
		})
	}
}

// TestAPartFilledOnDiskIsHandedOverWhole: a file past its first MiB but
// short of a part, filled on disk, is stored from its spool in one
// request on close; read back while it is written, or written out of
// order, its spool becomes its staging file, cut to its length, and the
// file goes on from there.
func TestAPartFilledOnDiskIsHandedOverWhole(t *testing.T) {
	const size = 3 * diskMiB
	for _, c := range []struct {
		name string
		// then acts on the open file after size bytes were written, and
		// returns the content it should store.
		then func(t *testing.T, f *fusefs.FS, h *os.File, data []byte) []byte
	}{
		{"closed", func(t *testing.T, f *fusefs.FS, h *os.File, data []byte) []byte { return data }},
		{"read back while written", func(t *testing.T, f *fusefs.FS, h *os.File, data []byte) []byte {
			// The kernel keeps the pages written through it: the read
			// reaches the mount once they are dropped.
			if err := unix.Fadvise(int(h.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, size)
			if _, err := h.ReadAt(got, 0); err != nil {
				t.Fatalf("read back: %v", err)
			}
			sameBytes(t, "read back", got, data)
			if n := fusefs.StagedBytes(f); n != size {
				t.Errorf("the handed-over spool takes %d bytes of staging, want the file's %d", n, size)
			}
			more := randomBytes(diskMiB)
			if _, err := h.Write(more); err != nil {
				t.Fatal(err)
			}
			return append(bytes.Clone(data), more...)
		}},
		{"rewritten at offset 10", func(t *testing.T, f *fusefs.FS, h *os.File, data []byte) []byte {
			if _, err := h.WriteAt([]byte("rewritten"), 10); err != nil {
				t.Fatal(err)
			}
			want := bytes.Clone(data)
			copy(want[10:], "rewritten")
			return want
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := memstore.New()
			f, dir := mountFSOf(t, st, partsOnDiskOptions())
			h, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			data := randomBytes(size)
			writeMiBs(t, h, data, nil)
			// On disk, and holding the room of what it holds, not of a
			// whole part.
			if n := fusefs.StagedBytes(f); n != size {
				t.Fatalf("%d bytes staged past the first MiB, want the file's %d", n, size)
			}
			want := c.then(t, f, h, data)
			if err := h.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			sameBytes(t, "stored", stored(t, st, "f"), want)
			// A staging file goes with the last RELEASE, which the
			// kernel sends after close(2) returned.
			eventually(t, 10*time.Second, "staging given back after close", func() bool { return fusefs.StagedBytes(f) == 0 })
			if n := fusefs.PartBufferBytes(f); n != 0 {
				t.Errorf("%d bytes of part buffers mapped for a file of less than a part", n)
			}
		})
	}
}

// TestAPartWithoutRoomOnDiskFillsInMemory: under a small memory limit,
// a part that finds the staging area without room for it when it starts
// waits for the file's own parts in flight to give theirs back; it fills
// in a part buffer only while other files hold the room, and the file's
// parts go back on disk once they give it back. Either way the file is
// stored whole, only at its close, and every spool's room is given back.
func TestAPartWithoutRoomOnDiskFillsInMemory(t *testing.T) {
	opts := partsOnDiskOptions()
	opts.StagingLimit = 30 << 20 // the least that holds three parts in half
	// filler makes another file take size bytes of staging, staged as
	// written out of order.
	filler := func(t *testing.T, dir string, size int64) *os.File {
		h, err := os.Create(filepath.Join(dir, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if _, err := h.WriteAt([]byte("x"), size-1); err != nil {
			t.Fatal(err)
		}
		return h
	}
	notYetStored := func(t *testing.T, st *memstore.Store) {
		if _, err := st.Head(t.Context(), "big"); err == nil {
			t.Fatal("the file is in the store before its close: its upload was completed half written")
		}
	}
	t.Run("its own parts hold the room", func(t *testing.T) {
		st := memstore.New()
		f, dir := mountFSOf(t, st, opts)
		h, err := os.Create(filepath.Join(dir, "big"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		data := randomBytes(4*diskPart + 123)
		writeMiBs(t, h, data[:diskPart], nil) // the first part, spooled, goes up
		if n := fusefs.StagedBytes(f); n != diskPart {
			t.Fatalf("%d bytes staged after the first part, want it spooled (%d)", n, diskPart)
		}
		// Room for the next part only once the first gave its back.
		filler(t, dir, opts.StagingLimit-2*diskPart+diskMiB)
		writeMiBs(t, h, data[diskPart:], func() {
			if n := fusefs.PartBufferBytes(f); n != 0 {
				t.Fatalf("%d bytes of part buffers mapped: a part filled in memory while the file's own part held the room", n)
			}
			notYetStored(t, st)
		})
		if err := h.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		sameBytes(t, "stored", stored(t, st, "big"), data)
	})
	t.Run("other files hold the room", func(t *testing.T) {
		st := memstore.New()
		f, dir := mountFSOf(t, st, opts)
		// Less than a part left.
		other := filler(t, dir, opts.StagingLimit-diskPart+diskMiB)
		h, err := os.Create(filepath.Join(dir, "big"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		data := randomBytes(6*diskPart + 123)
		writeMiBs(t, h, data[:3*diskPart], func() { notYetStored(t, st) })
		if fusefs.PartBufferBytes(f) == 0 {
			t.Fatal("no part filled in memory while the staging area had no room")
		}
		if err := other.Close(); err != nil {
			t.Fatal(err)
		}
		// A staging file goes with the last RELEASE, which the kernel
		// sends after close(2) returned.
		eventually(t, 10*time.Second, "the other file's staging given back", func() bool { return fusefs.StagedBytes(f) == 0 })
		var spooled bool
		writeMiBs(t, h, data[3*diskPart:], func() {
			spooled = spooled || fusefs.StagedBytes(f) > 0
			notYetStored(t, st)
		})
		if !spooled {
			t.Error("no part went back on disk once the staging area had room")
		}
		if err := h.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		sameBytes(t, "stored", stored(t, st, "big"), data)
		if n := fusefs.StagedBytes(f); n != 0 {
			t.Errorf("%d bytes staged after close", n)
		}
		if held := f.Stats().BufferBytes.Load(); held != 0 {
			t.Errorf("%d bytes of the memory limit still held after close", held)
		}
	})
}
