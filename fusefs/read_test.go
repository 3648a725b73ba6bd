package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// Sequential reads answered from readahead chunks return the object's
// bytes even when the kernel's READs arrive out of order (a readahead
// window far above objfuse's, and four threads reading one descriptor),
// and every chunk's memory is back once the files are closed: a reply
// that kept its chunk would starve readahead for good.
func TestReadaheadRepliesFromChunks(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.fresh(t)
			const size = 48 << 20
			one, four := randomBytes(size), randomBytes(size)
			put(t, st, "one", one)
			put(t, st, "four", four)
			// An overtaken READ waits for its bytes long enough on a
			// loaded machine: else it is fetched alone, not spliced.
			f, dir := mountFSOf(t, st, fusefs.WithReorderWait(fusefs.Options{MemoryLimit: 20 << 20}, 2*time.Second))
			if err := (mounts.System{}).TuneReadahead(dir, 16<<10); err != nil {
				t.Fatal(err)
			}

			got, err := os.ReadFile(filepath.Join(dir, "one"))
			if err != nil || !bytes.Equal(got, one) {
				t.Fatalf("sequential read: %d bytes, equal %v, err %v", len(got), bytes.Equal(got, one), err)
			}

			fh, err := os.Open(filepath.Join(dir, "four"))
			if err != nil {
				t.Fatal(err)
			}
			const block, threads = 1 << 20, 4
			errs := make(chan error, threads)
			for w := range threads {
				go func() {
					buf := make([]byte, block)
					for off := int64(w * block); off < size; off += threads * block {
						n, err := fh.ReadAt(buf, off)
						if err != nil || n != block || !bytes.Equal(buf, four[off:off+block]) {
							errs <- fmt.Errorf("thread %d at %d: %d bytes, %v", w, off, n, err)
							return
						}
					}
					errs <- nil
				}()
			}
			for range threads {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			fh.Close()

			eventually(t, 10*time.Second, "readahead memory to be released", func() bool {
				return f.Stats().BufferBytes.Load() == 0
			})
			// MinIO on plain HTTP: the readahead went socket → pipe →
			// /dev/fuse; the memory store's bodies cannot splice.
			spliced := f.Stats().BytesSpliced.Load()
			if wantSplice := b.name != "memory"; wantSplice != (spliced >= size) {
				t.Errorf("%d bytes spliced through pipes; want at least %d: %v", spliced, size, wantSplice)
			}
		})
	}
}

// --no-splice keeps readahead in buffers on a store that could splice,
// and reads the same bytes.
func TestNoSpliceReadsFromBuffers(t *testing.T) {
	st := backends()[1].fresh(t)
	const size = 24 << 20
	data := randomBytes(size)
	put(t, st, "f", data)
	f, dir := mountFSOf(t, st, fusefs.Options{NoSplice: true})
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %d bytes, equal %v, err %v", len(got), bytes.Equal(got, data), err)
	}
	if n := f.Stats().BytesSpliced.Load(); n != 0 {
		t.Errorf("%d bytes spliced with NoSplice", n)
	}
}

// The readahead window is one READ of the largest size, so that no small
// READ trails each window.
func TestReadaheadIsOneLargestRead(t *testing.T) {
	if mounts.ReadaheadKiB*1024 != fusefs.MaxRead {
		t.Fatalf("readahead %d KiB, largest READ %d bytes", mounts.ReadaheadKiB, fusefs.MaxRead)
	}
}

// fragmentingStore's GET bodies splice in pieces of 1000 bytes, as
// packets on an ordinary network arrive from a socket: each piece takes a
// pipe slot of its own.
//
// vmsplice puts references to the body's pages in the pipe, not copies:
// were the body's memory freed while its bytes wait in a chunk's pipe,
// Go would hand the same pages to new allocations and the READ would
// return whatever those wrote. So every body stays referenced by the
// store until the test ends (kept).
type fragmentingStore struct {
	store.Store
	kept *keptBodies
}

// keptBodies holds every body fragmentingStore served.
type keptBodies struct {
	mu     sync.Mutex
	bodies [][]byte
}

func newFragmentingStore(t *testing.T, st store.Store) fragmentingStore {
	kept := &keptBodies{}
	t.Cleanup(func() { runtime.KeepAlive(kept) })
	return fragmentingStore{Store: st, kept: kept}
}

func (fragmentingStore) Splices() bool { return true }

func (s fragmentingStore) Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error) {
	body, err := s.Store.Get(ctx, key, etag, off, length)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	s.kept.mu.Lock()
	s.kept.bodies = append(s.kept.bodies, data)
	s.kept.mu.Unlock()
	return &piecesBody{Reader: bytes.NewReader(data), data: data}, nil
}

// piecesBody is a store.PipeSource that vmsplices 1000-byte pieces (the
// data is never written again, as vmsplice requires).
type piecesBody struct {
	*bytes.Reader
	data []byte
}

func (b *piecesBody) Close() error { return nil }

func (b *piecesBody) SpliceTo(fd, max int) (int, error) {
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	var iovs []unix.Iovec
	for rest := b.data[:min(max, len(b.data), 64*1000)]; len(rest) > 0; {
		n := min(1000, len(rest))
		iov := unix.Iovec{Base: &rest[0]}
		iov.SetLen(n)
		iovs = append(iovs, iov)
		rest = rest[n:]
	}
	n, err := unix.Vmsplice(fd, iovs, 0)
	if n > 0 {
		b.data = b.data[n:]
	}
	return n, err
}

// Readahead from a network that delivers small packets: pipes fill by
// slots long before bytes, and every READ still gets all its bytes (the
// reply is copied when its pipe fills), never an error or a short reply
// the kernel would take for the end of the file. An overtaken READ waits
// up to 2 s (not 20 ms) so that on a loaded machine the pipes still serve
// the READs, which the test asserts.
func TestSplicedReadsOfSmallPackets(t *testing.T) {
	const size = 24 << 20
	data := randomBytes(size)
	st := memstore.New()
	put(t, st, "f", data)
	f, dir := mountFSOf(t, newFragmentingStore(t, st), fusefs.WithReorderWait(fusefs.Options{}, 2*time.Second))
	if err := (mounts.System{}).TuneReadahead(dir, mounts.ReadaheadKiB); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %d bytes, equal %v, err %v", len(got), bytes.Equal(got, data), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "f")); err != nil || fi.Size() != size {
		t.Fatalf("size after the read: %v, %v", fi, err)
	}
	st2 := f.Stats()
	t.Logf("spliced %d bytes, %d READs copied", st2.BytesSpliced.Load(), st2.CopiedReplies.Load())
	// How many bytes go through pipes depends on how the READs
	// interleave (an out-of-order burst restarts the readahead); that
	// some did, and that their replies were copied, does not.
	if st2.BytesSpliced.Load() == 0 || st2.CopiedReplies.Load() == 0 {
		t.Fatalf("spliced %d bytes, %d READs copied: the small-packet path did not run", st2.BytesSpliced.Load(), st2.CopiedReplies.Load())
	}
}
