package fusefs

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"sync/atomic"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// getCounter counts GETs.
type getCounter struct {
	store.Store
	gets atomic.Int64
}

func (s *getCounter) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key, off, length)
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
		st := &getCounter{Store: memstore.New()}
		if _, err := st.Put(t.Context(), "f", bytes.NewReader(data), size, nil); err != nil {
			t.Fatal(err)
		}
		f, err := New(st, Options{PartSize: 5 << 20, MemoryLimit: 40 << 20})
		if err != nil {
			t.Fatal(err)
		}
		r := &reader{fsys: f}
		st.gets.Store(0)
		dest := make([]byte, block)
		for _, off := range offsets {
			res, n, err := r.read(t.Context(), "f", "etag", size, dest, off)
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
		gets[name] = st.gets.Load()
	}
	t.Logf("GETs for %d MiB: %v", size>>20, gets)
	if gets["swapped"] > gets["in order"]+1 {
		t.Fatalf("reordered READs cost %d GETs, in order %d: reordering dropped the prefetch", gets["swapped"], gets["in order"])
	}
}
