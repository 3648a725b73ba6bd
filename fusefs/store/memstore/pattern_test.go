package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// TestAPatternedStoreKeepsOnlyThePattern: a patterned store takes the
// key's pattern, in one put or in parts, reads it back from any offset,
// and refuses other bytes, misplaced parts included.
func TestAPatternedStoreKeepsOnlyThePattern(t *testing.T) {
	ctx := context.Background()
	st := memstore.NewPatterned()
	pattern := func(key string, off, n int64) []byte {
		b := make([]byte, n)
		memstore.Pattern(key, off, b)
		return b
	}
	if _, err := st.Put(ctx, "a", bytes.NewReader(pattern("a", 0, 1000)), 1000, nil); err != nil {
		t.Fatalf("put of the pattern: %v", err)
	}
	if _, err := st.Put(ctx, "b", bytes.NewReader(pattern("a", 0, 1000)), 1000, nil); err == nil {
		t.Fatal("put of another key's pattern succeeded")
	}
	body, err := st.Get(ctx, "a", store.AnyVersion, 100, 50)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	if !bytes.Equal(got, pattern("a", 100, 50)) {
		t.Fatal("a ranged get is not the pattern at its offset")
	}

	parts := func(order []int) error {
		u, err := st.NewUpload(ctx, "m", store.AnyVersion, nil)
		if err != nil {
			return err
		}
		sizes := []int64{store.MinPartSize, store.MinPartSize, 123}
		var off int64
		offs := make([]int64, len(sizes))
		for i, s := range sizes {
			offs[i], off = off, off+s
		}
		for i, number := range order {
			data := pattern("m", offs[i], sizes[i])
			if err := u.PutPart(ctx, number, bytes.NewReader(data), sizes[i]); err != nil {
				return err
			}
		}
		o, err := u.Complete(ctx)
		if err == nil && o.Size != off {
			t.Fatalf("completed %d bytes, want %d", o.Size, off)
		}
		return err
	}
	if err := parts([]int{1, 2, 3}); err != nil {
		t.Fatalf("an upload of the pattern in parts: %v", err)
	}
	if err := parts([]int{2, 1, 3}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("an upload with two parts swapped: %v, want ErrInvalid", err)
	}
}
