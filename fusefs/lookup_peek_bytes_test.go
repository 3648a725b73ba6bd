package fusefs

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

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

// distinct is n bytes no two aligned windows of which are alike.
func distinct(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i>>8)
	}
	return b
}

// Peeked bytes go only to a READ of the version they were peeked under,
// only when they hold all it asks, at the offset it asks; a READ of their
// start leaves them for the next, a READ of their end takes them. Their
// memory is charged to the mount's limit while they are held.
func TestPeekedBytesGoOnlyToTheirVersion(t *testing.T) {
	f := newPeekedFS(t)
	data := distinct(10000)
	if !keepPeeked(f, "k", "v1", data) {
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
	if !f.peeked.take("k", "v1", dest, 53) || !bytes.Equal(dest, data[53:153]) {
		t.Fatalf("a READ at 53 got %v..., want %v...", dest[:4], data[53:57])
	}
	if !f.peeked.take("k", "v1", dest, int64(len(data))-100) || !bytes.Equal(dest, data[len(data)-100:]) {
		t.Fatal("a READ of the end after one of the start was not answered from the peek")
	}
	if f.peeked.take("k", "v1", dest, 53) {
		t.Fatal("the peeked bytes are still held after a READ took their end")
	}
	if got := f.Stats().BufferBytes.Load(); got != 0 {
		t.Fatalf("BufferBytes %d once the peeked bytes were taken, want 0", got)
	}
}

// Peeks hold at most peekedLimit bytes: newer ones push the oldest out.
// The same version peeked again is held once.
func TestPeekedBytesStayWithinTheirLimit(t *testing.T) {
	f := newPeekedFS(t)
	keepPeeked(f, "0", "v", make([]byte, 1000))
	keepPeeked(f, "0", "v", make([]byte, 1000))
	if held := f.peeked.heldBytes(); held != 1000 || f.Stats().BufferBytes.Load() != 1000 {
		t.Fatalf("one version peeked twice holds %d bytes (BufferBytes %d), want 1000", held, f.Stats().BufferBytes.Load())
	}
	n := peekedLimit/peekBytes + 5
	for i := range n {
		if !keepPeeked(f, fmt.Sprint(i), "v", make([]byte, peekBytes)) {
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
// the TTL, and so do those peeked after an expiry ran.
func TestPeekedBytesNotReadGoAfterTheirTTL(t *testing.T) {
	f := newPeekedFS(t)
	f.peeked.ttl = 50 * time.Millisecond
	gone := func() bool { return f.peeked.heldBytes() == 0 && f.Stats().BufferBytes.Load() == 0 }
	for _, key := range []string{"a", "b"} {
		if !keepPeeked(f, key, "v", make([]byte, 1000)) {
			t.Fatalf("keep %s refused", key)
		}
		if gone() {
			t.Fatalf("%s: nothing held right after the peek", key)
		}
		if !pollUntil(5*time.Second, gone) {
			t.Fatalf("%s: peeked bytes still held 5 s after their peek (BufferBytes %d)", key, f.Stats().BufferBytes.Load())
		}
	}
}

// pollUntil polls cond until it holds (true) or d has passed (false); the
// package's external tests use it too (PollUntil).
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-time.After(20 * time.Millisecond)
	}
	return true
}

// A peek the memory limit has no room for is not held (its bytes go to
// the read cache instead), nor one after the FS closed, which gave back
// what was held.
func TestPeeksTakeNoMemoryTheLimitLacks(t *testing.T) {
	f := newPeekedFS(t)
	if !f.tryReserve(f.opts.MemoryLimit) {
		t.Fatal("could not take the whole memory limit")
	}
	if keepPeeked(f, "k", "v", make([]byte, 1000)) {
		t.Fatal("a peek was held beyond the memory limit")
	}
	f.release(f.opts.MemoryLimit)
	if !keepPeeked(f, "k", "v", make([]byte, 1000)) {
		t.Fatal("keep refused bytes the memory limit has room for")
	}
	f.Close()
	if f.peeked.heldBytes() != 0 || f.Stats().BufferBytes.Load() != 0 {
		t.Fatalf("Close left %d peeked bytes held (BufferBytes %d)", f.peeked.heldBytes(), f.Stats().BufferBytes.Load())
	}
	if keepPeeked(f, "k2", "v", make([]byte, 1000)) || f.Stats().BufferBytes.Load() != 0 {
		t.Fatal("a peek was held after Close")
	}
}

// A handle opened for reading asks the kernel for no FLUSH at its close;
// one opened for writing, or truncating, does (its close uploads).
func TestOnlyReadersOpenWithoutFlush(t *testing.T) {
	f := newPeekedFS(t)
	n := &fileNode{fsys: f, stored: true}
	for _, c := range []struct {
		flags   uint32
		noFlush bool
	}{{syscall.O_RDONLY, true}, {syscall.O_WRONLY, false}, {syscall.O_RDWR, false}, {syscall.O_RDONLY | syscall.O_TRUNC, false}} {
		_, fuseFlags := n.openHandle(c.flags)
		if got := fuseFlags&fuse.FOPEN_NOFLUSH != 0; got != c.noFlush {
			t.Errorf("open with flags %#o: FOPEN_NOFLUSH %v, want %v", c.flags, got, c.noFlush)
		}
	}
}

// keepPeeked has f's peeks keep data as a peek's buffer would hold it.
func keepPeeked(f *FS, key, etag string, data []byte) bool {
	buf := make([]byte, max(len(data), peekBytes))
	copy(buf, data)
	return f.peeked.keep(key, etag, &buf, len(data))
}
