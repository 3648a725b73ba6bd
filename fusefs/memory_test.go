package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// liveHeap is the heap still in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// heldMemory is what the process holds that the mount may have taken:
// the live heap, and the part buffers f mapped outside it.
func heldMemory(f *fusefs.FS) int64 { return liveHeap() + f.MappedBufferBytes() }

const (
	memTestLimit = 10 << 20 // two 5 MiB parts: the least Validate allows
	memTestFiles = 128
	memTestSize  = 512 << 10 // under smallFileLimit: held in a plain buffer
)

// memTestFile is the i-th file the memory tests write: made again to
// check it, as the test holding them all would hide what the mount holds.
func memTestFile(i int) (name string, data []byte) {
	data = make([]byte, memTestSize)
	rand.NewChaCha8([32]byte{byte(i)}).Read(data)
	return fmt.Sprintf("f%03d", i), data
}

func checkStored(t *testing.T, st store.Store) {
	t.Helper()
	for i := range memTestFiles {
		name, data := memTestFile(i)
		sameBytes(t, name, stored(t, st, name), data)
	}
}

// checkHeldMemory fails the test if the data written so far takes more
// memory than the limit allows, with slack for everything else a mount
// holds (the kernel's request buffers, inodes). 64 MiB were written.
func checkHeldMemory(t *testing.T, f *fusefs.FS, base int64) {
	t.Helper()
	// go-fuse keeps a 1 MiB request buffer per reader, and runs up to
	// GOMAXPROCS (at most 16) readers and one more.
	slack := int64(16<<20 + (min(runtime.GOMAXPROCS(0), 16)+1)<<20)
	if grew := heldMemory(f) - base; grew > memTestLimit+slack {
		t.Fatalf("the heap and mapped buffers grew by %d MiB holding %d MiB of written data; the memory limit is %d MiB",
			grew>>20, memTestFiles*memTestSize>>20, memTestLimit>>20)
	}
	if held := f.Stats().BufferBytes.Load(); held > memTestLimit {
		t.Fatalf("%d bytes held in buffers, over the %d limit", held, memTestLimit)
	}
}

// TestManyOpenFilesStayWithinTheMemoryLimit: small files written and held
// open take no more than MemoryLimit between them; the rest goes to
// staging files on disk, and every byte reaches the store on close.
func TestManyOpenFilesStayWithinTheMemoryLimit(t *testing.T) {
	st := memstore.New()
	f, dir := mountFSOf(t, st, fusefs.Options{MemoryLimit: memTestLimit})
	base := heldMemory(f)

	var open []*os.File
	for i := range memTestFiles {
		name, data := memTestFile(i)
		h, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() }) // a failed test must still unmount
		open = append(open, h)
		if _, err := h.Write(data); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	checkHeldMemory(t, f, base)
	if f.Stats().MemorySpills.Load() == 0 {
		t.Fatal("no file was counted as continued on disk")
	}
	for _, h := range open {
		if err := h.Close(); err != nil {
			t.Fatalf("close %s: %v", h.Name(), err)
		}
	}
	checkStored(t, st)
	if held := f.Stats().BufferBytes.Load(); held != 0 {
		t.Fatalf("%d bytes still held after every file was closed", held)
	}
}

// TestAsyncBacklogStaysWithinTheMemoryLimit: with asynchronous close and
// uploads that cannot keep up (here: stalled), closed files waiting for
// their upload take no more than MemoryLimit; once uploads resume every
// file arrives whole.
func TestAsyncBacklogStaysWithinTheMemoryLimit(t *testing.T) {
	st := memstore.New()
	stalled := make(chan struct{})
	st.FailWith = func(op, key string) error {
		if op == "put" {
			<-stalled
		}
		return nil
	}
	f, dir := mountFSOf(t, st, fusefs.Options{MemoryLimit: memTestLimit, AsyncClose: true})
	resume := sync.OnceFunc(func() { close(stalled) })
	t.Cleanup(resume) // a failed test must still unmount
	base := heldMemory(f)

	for i := range memTestFiles {
		name, data := memTestFile(i)
		writeFile(t, filepath.Join(dir, name), data)
	}
	checkHeldMemory(t, f, base)
	resume()
	eventually(t, 30*time.Second, "every upload", func() bool {
		return f.Stats().Uploads.Load() == memTestFiles
	})
	checkStored(t, st)
}

// TestAsyncBacklogWaitsForUploads: when closed files wait for uploads
// that are under way, a writer that finds the memory limit full waits for
// them (it slows to the upload rate) rather than continuing on disk.
func TestAsyncBacklogWaitsForUploads(t *testing.T) {
	st := memstore.New()
	// A slow store: one upload at a time goes through, every few ms.
	tokens := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				close(tokens)
				return
			case <-tick.C:
				select {
				case tokens <- struct{}{}:
				case <-done:
					close(tokens)
					return
				}
			}
		}
	}()
	st.FailWith = func(op, key string) error {
		if op == "put" {
			<-tokens
		}
		return nil
	}
	// Writers wait for memory as long as uploads take here, however
	// slowly this machine hands out the tokens.
	f, dir := mountFSOf(t, st, fusefs.WithFirstBufferWait(fusefs.Options{MemoryLimit: memTestLimit, AsyncClose: true}, time.Minute))
	for i := range memTestFiles {
		name, data := memTestFile(i)
		writeFile(t, filepath.Join(dir, name), data)
		if held := f.Stats().BufferBytes.Load(); held > memTestLimit {
			t.Fatalf("%d bytes held in buffers, over the %d limit", held, memTestLimit)
		}
	}
	eventually(t, 30*time.Second, "every upload", func() bool {
		return f.Stats().Uploads.Load() == memTestFiles
	})
	checkStored(t, st)
	if n := f.Stats().MemorySpills.Load(); n != 0 {
		t.Fatalf("%d files went to disk while uploads were under way; want the writer to wait for them", n)
	}
}

// TestExpiredListingsAreDropped: a directory's listing is dropped once it
// has expired, as it answers nothing then. Held for as long as the kernel
// keeps the directory, a large one would take several hundred bytes a
// name (with objfuse-mount over MinIO: 49 MB for 100,000 names).
func TestExpiredListingsAreDropped(t *testing.T) {
	const ttl = 50 * time.Millisecond
	mem := memstore.New()
	sizes := map[string]int{"big": 5000, "small": 10}
	for dir, n := range sizes {
		for i := range n {
			put(t, mem, fmt.Sprintf("%s/f%05d", dir, i), []byte("x"))
		}
	}
	st := &countingStore{Store: mem}
	f, root := mountFSOf(t, st, fusefs.Options{StatTTL: time.Hour, ListTTL: ttl})
	for dir, n := range sizes {
		names, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil || len(names) != n {
			t.Fatalf("%s lists %d names (%v), want %d", dir, len(names), err, n)
		}
	}
	for dir := range sizes {
		eventually(t, 10*time.Second, dir+"'s expired listing to be dropped", func() bool {
			return !fusefs.HoldsListing(f, dir)
		})
	}

	// What the dropped listing was still good for: a new name in the
	// small directory is answered by listing it again, one LIST and no
	// HEAD, as it would have been with the expired listing kept.
	st.heads.Store(0)
	st.lists.Store(0)
	if _, err := os.Stat(filepath.Join(root, "small", "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of a new name: %v, want ENOENT", err)
	}
	if heads, lists := st.heads.Load(), st.lists.Load(); heads != 0 || lists != 1 {
		t.Fatalf("a new name after the listing was dropped: %d HEADs, %d LISTs; want one relist", heads, lists)
	}
}

// TestAFailedPartsBufferIsNotReusedAtOnce: after a part's upload failed,
// the HTTP transport may still be reading its body, so its buffer stays
// out of the pool (and counted) for a while instead of being filled with
// the next file's bytes.
func TestAFailedPartsBufferIsNotReusedAtOnce(t *testing.T) {
	st := memstore.New()
	st.FailWith = func(op, key string) error {
		if op == "putpart" {
			return errors.New("injected part failure")
		}
		return nil
	}
	const part = 5 << 20
	f, dir := mountFSOf(t, st, fusefs.Options{MemoryLimit: 4 * part, PartSize: part, Concurrency: 3})
	h, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3*part)
	_, werr := h.Write(data)
	cerr := h.Close()
	if werr == nil && cerr == nil {
		t.Fatal("a file whose parts all failed was written and closed without an error")
	}
	if held := f.Stats().BufferBytes.Load(); held < part {
		t.Fatalf("%d bytes held right after the failure: the failed part's buffer went back at once", held)
	}
}

// The buffers go-fuse reads requests into are the mount's, mapped
// outside the Go heap and counted with its part buffers: a WRITE's data
// arrives in one.
func TestRequestsAreReadIntoMappedBuffers(t *testing.T) {
	fsys, dir := mountFSOf(t, memstore.New(), fusefs.Options{})
	if err := os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := fusefs.RequestBufferBytes(fsys); got < fusefs.MaxRead {
		t.Fatalf("%d bytes of request buffers mapped after a write, want at least one buffer of %d", got, fusefs.MaxRead)
	}
	if fsys.MappedBufferBytes() < fusefs.RequestBufferBytes(fsys) {
		t.Fatalf("MappedBufferBytes %d leaves out the request buffers' %d", fsys.MappedBufferBytes(), fusefs.RequestBufferBytes(fsys))
	}
}
