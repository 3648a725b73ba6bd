package fusefs

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

func newPeekedFS(t *testing.T) *FS {
	t.Helper()
	f, err := New(memstore.New(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Peeked bytes go only to a READ of the version they were peeked under,
// only when they hold all it asks, and once; their memory is charged to
// the mount's limit while they are held.
func TestPeekedBytesGoOnlyToTheirVersion(t *testing.T) {
	f := newPeekedFS(t)
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if !f.peeked.keep("k", "v1", data) {
		t.Fatal("keep refused bytes the memory limit has room for")
	}
	if got := f.Stats().BufferBytes.Load(); got != int64(len(data)) {
		t.Fatalf("BufferBytes %d while %d peeked bytes are held", got, len(data))
	}
	dest := make([]byte, 100)
	if f.peeked.take("k", "v2", dest, 0) {
		t.Fatal("a READ of another version took the peeked bytes")
	}
	if f.peeked.take("other", "v1", dest, 0) {
		t.Fatal("a READ of another key took the peeked bytes")
	}
	if f.peeked.take("k", "v1", make([]byte, 200), int64(len(data))-100) {
		t.Fatal("a READ past what was peeked was answered from it")
	}
	if !f.peeked.take("k", "v1", dest, 50) || !bytes.Equal(dest, data[50:150]) {
		t.Fatalf("a READ of the peeked range got %q, want %q", dest, data[50:150])
	}
	if f.peeked.take("k", "v1", dest, 50) {
		t.Fatal("the peeked bytes were taken twice")
	}
	if got := f.Stats().BufferBytes.Load(); got != 0 {
		t.Fatalf("BufferBytes %d once the peeked bytes were taken, want 0", got)
	}
}

// Peeks hold at most peekedLimit bytes: newer ones push the oldest out.
func TestPeekedBytesStayWithinTheirLimit(t *testing.T) {
	f := newPeekedFS(t)
	n := peekedLimit/peekBytes + 5
	for i := range n {
		if !f.peeked.keep(fmt.Sprint(i), "v", make([]byte, peekBytes)) {
			t.Fatalf("keep %d refused", i)
		}
	}
	if held := f.peeked.heldBytes(); held > peekedLimit || f.Stats().BufferBytes.Load() != held {
		t.Fatalf("%d peeks of %d bytes hold %d bytes (BufferBytes %d), want at most %d", n, peekBytes, held, f.Stats().BufferBytes.Load(), peekedLimit)
	}
	dest := make([]byte, 10)
	if f.peeked.take("0", "v", dest, 0) {
		t.Fatal("the oldest peek is still held past the limit")
	}
	if !f.peeked.take(fmt.Sprint(n-1), "v", dest, 0) {
		t.Fatal("the newest peek was dropped")
	}
}

// Bytes no READ takes (a stat after all) give their memory back after
// peekedTTL.
func TestPeekedBytesNotReadGoAfterTheirTTL(t *testing.T) {
	f := newPeekedFS(t)
	f.peeked.keep("a", "v", make([]byte, 1000))
	deadline := time.Now().Add(peekedTTL + 10*time.Second)
	for f.peeked.heldBytes() != 0 || f.Stats().BufferBytes.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("peeked bytes still held %v after their peek (BufferBytes %d)", peekedTTL+10*time.Second, f.Stats().BufferBytes.Load())
		}
		<-time.After(20 * time.Millisecond) // polled: the expiry runs on its own timer
	}
}

// A peek the memory limit has no room for is not held (its bytes go to
// the read cache instead).
func TestPeeksTakeNoMemoryTheLimitLacks(t *testing.T) {
	f := newPeekedFS(t)
	if !f.tryReserve(f.opts.MemoryLimit) {
		t.Fatal("could not take the whole memory limit")
	}
	defer f.release(f.opts.MemoryLimit)
	if f.peeked.keep("k", "v", make([]byte, 1000)) {
		t.Fatal("a peek was held beyond the memory limit")
	}
}
