package fusefs

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// GetCounter counts GETs (exported for the external tests too).
type GetCounter struct {
	store.Store
	Gets atomic.Int64
}

func (s *GetCounter) Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error) {
	s.Gets.Add(1)
	return s.Store.Get(ctx, key, etag, off, length)
}

// READs of one readahead window that arrive out of order (the kernel keeps
// several in flight) are served from the prefetched chunks: one GET per
// chunk, as for READs in order, not a direct GET and a dropped prefetch
// for each READ that overtook another.
func TestReorderedReadsKeepThePrefetch(t *testing.T) {
	const block, size = 1 << 20, 40 << 20
	data := make([]byte, size)
	rand.Read(data)
	// In order, then the same READs with neighbours swapped: 0 1 3 2 5 4 ...
	inOrder := make([]int64, size/block)
	swapped := make([]int64, size/block)
	for i := range inOrder {
		inOrder[i] = int64(i) * block
		j := i
		if i >= 2 {
			j = i ^ 1
		}
		if j < len(swapped) {
			swapped[i] = int64(j) * block
		} else {
			swapped[i] = int64(i) * block
		}
	}
	gets := map[string]int64{}
	for name, offsets := range map[string][]int64{"in order": inOrder, "swapped": swapped} {
		st := &GetCounter{Store: memstore.New()}
		o, err := st.Put(t.Context(), "f", bytes.NewReader(data), size, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := New(st, Options{PartSize: 5 << 20, MemoryLimit: 40 << 20})
		if err != nil {
			t.Fatal(err)
		}
		r := &reader{fsys: f}
		st.Gets.Store(0)
		dest := make([]byte, block)
		for _, off := range offsets {
			res, n, err := r.read(t.Context(), "f", o.ETag, size, dest, off)
			if err != nil || n != block {
				t.Fatalf("%s: read at %d: %d bytes, %v", name, off, n, err)
			}
			got, _ := res.Bytes(make([]byte, 0, block))
			if !bytes.Equal(got, data[off:off+block]) {
				t.Fatalf("%s: wrong bytes at %d", name, off)
			}
			res.Done()
		}
		r.close()
		gets[name] = st.Gets.Load()
	}
	t.Logf("GETs for %d MiB: %v", size>>20, gets)
	if gets["swapped"] > gets["in order"]+1 {
		t.Fatalf("reordered READs cost %d GETs, in order %d: reordering dropped the prefetch", gets["swapped"], gets["in order"])
	}
}

// splicingStore claims its bodies can splice, so the reader keeps its
// readahead in pipes; memstore's bodies cannot, so they are copied in.
// The real splice from a socket is covered on MinIO by
// TestReadaheadRepliesFromChunks.
type splicingStore struct{ *GetCounter }

func (splicingStore) Splices() bool { return true }

func newPipeReader(t *testing.T, data []byte, wait time.Duration) (*reader, *GetCounter) {
	t.Helper()
	st := &GetCounter{Store: memstore.New()}
	if _, err := st.Put(t.Context(), "f", bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
	f, err := New(splicingStore{st}, Options{PartSize: 5 << 20, MemoryLimit: 40 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !f.splicing {
		t.Fatal("a store whose bodies splice did not get pipes")
	}
	f.reorderWait = wait
	r := &reader{fsys: f}
	t.Cleanup(r.close)
	return r, st
}

// readAt is one READ through r, checked against data.
func readAt(t *testing.T, r *reader, data []byte, off int64, n int) error {
	dest := make([]byte, n)
	res, got, err := r.read(t.Context(), "f", store.AnyVersion, int64(len(data)), dest, off)
	if err != nil || got != n {
		return fmt.Errorf("read at %d: %d bytes, %v", off, got, err)
	}
	defer res.Done()
	b, status := res.Bytes(make([]byte, 0, n))
	if !status.Ok() || !bytes.Equal(b, data[off:off+int64(n)]) {
		return fmt.Errorf("read at %d: wrong bytes (status %v)", off, status)
	}
	return nil
}

// With pipes, a READ that overtook its neighbour waits for it rather than
// throwing its bytes away: every byte comes through the pipes, with one
// GET per chunk as for READs in order.
func TestReorderedReadsThroughPipes(t *testing.T) {
	const block, size = MaxRead, 40 << 20
	data := make([]byte, size)
	rand.Read(data)
	r, st := newPipeReader(t, data, time.Minute)
	for _, off := range []int64{0, block} {
		if err := readAt(t, r, data, off, block); err != nil {
			t.Fatal(err)
		}
	}
	// Then pairs whose second READ starts first: 3 before 2, 5 before 4...
	last := int64(size/block) * block
	for off := int64(2 * block); off+2*block <= last; off += 2 * block {
		errs := make(chan error, 2)
		go func() { errs <- readAt(t, r, data, off+block, block) }()
		go func() { errs <- readAt(t, r, data, off, block) }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	// 2 direct READs, then chunks of at most 1, 2, 4 and 5 MiB (the
	// part size), each ending on a MiB boundary.
	if gets, want := st.Gets.Load(), int64(2+3+(size-7<<20)/(5<<20)+1); gets > want {
		t.Errorf("%d GETs for %d MiB, want at most %d: overtaken READs fell back to GETs", gets, size>>20, want)
	}
	if spliced := r.fsys.stats.BytesSpliced.Load(); spliced < last-2*block {
		t.Errorf("%d bytes went through pipes, want at least %d", spliced, last-2*block)
	}
}

// A READ whose predecessor never comes (the kernel had those pages) waits
// reorderWait, then skips the bytes; if the skipped range is read after
// all, it comes with a GET of its own.
func TestSkippedRangeOfAPipeIsFetchedAgain(t *testing.T) {
	const block, size = MaxRead, 16 << 20
	data := make([]byte, size)
	rand.Read(data)
	r, st := newPipeReader(t, data, time.Millisecond)
	for _, off := range []int64{0, block, 3 * block} {
		if err := readAt(t, r, data, off, block); err != nil {
			t.Fatal(err)
		}
	}
	if spliced := r.fsys.stats.BytesSpliced.Load(); spliced < 3*block {
		t.Fatalf("%d bytes went through pipes, want at least %d", spliced, 3*block)
	}
	before := st.Gets.Load()
	if err := readAt(t, r, data, 2*block, block); err != nil {
		t.Fatal(err)
	}
	if gets := st.Gets.Load() - before; gets != 1 {
		t.Errorf("the skipped range took %d GETs, want 1", gets)
	}
	if err := readAt(t, r, data, 4*block, block); err != nil {
		t.Fatal(err)
	}
}

// A reply whose splice into /dev/fuse failed part-way has lost bytes:
// go-fuse's fallback must get an error, not the rest of them, which the
// kernel would take for a short file (or the wrong bytes at the offset).
func TestFailedSpliceFailsTheRead(t *testing.T) {
	reply := newPipeReply(make([]byte, 4096))
	defer reply.Done()
	if reply.spilled {
		t.Fatal("no reply pipe")
	}
	if _, err := unix.Write(reply.w, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	reply.got = 4096
	fd, n := reply.Stateful()
	if n != 4096 {
		t.Fatalf("Stateful size %d", n)
	}
	// The splice that then failed took half.
	if _, err := unix.Read(int(fd), make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	if b, status := reply.Bytes(make([]byte, 0, 4096)); status != fuse.EIO {
		t.Fatalf("Bytes after a failed splice: %d bytes, status %v; want EIO", len(b), status)
	}
}

// A reply's pipe has half the slots of the pipe go-fuse moves it into
// after the header, for every READ size: more pieces than go-fuse's pipe
// holds would become a short reply.
func TestReplyPipeFitsGoFusePipe(t *testing.T) {
	for _, size := range []int{1, 100, 4096, 4097, 12272, 65536, 500 << 10, MaxRead} {
		n := size + fuseHeaderSize + 4096 // what go-fuse grows its pipe to
		pages := (n + 4095) / 4096
		gf := 1
		for gf < pages {
			gf *= 2
		}
		if mine := replySlots(size); mine < 1 || mine > gf-1 {
			t.Errorf("READ of %d: reply pipe %d slots, go-fuse's %d", size, mine, gf)
		}
	}
}
