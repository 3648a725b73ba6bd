package fusefs

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// minChunk is the first readahead chunk; chunks double up to PartSize as
// a sequential read goes on, so short reads stay cheap and long ones fast.
const minChunk = 1 << 20

// reader serves one handle's reads of a clean object: small random reads
// become ranged GETs of just what was asked; once reads are sequential it
// keeps up to Concurrency chunks in flight ahead of the reader, in
// buffers or, when the store's bodies can splice, in pipes (read_pipes.go).
type reader struct {
	fsys *FS

	mu        sync.Mutex
	next      int64 // where a sequential read would continue
	streak    int   // sequential reads in a row
	chunkSize int
	etag      string
	chunks    []*chunk // ascending and contiguous
	// noPipes: a chunk pipe could not be had (the per-user pipe quota),
	// so this reader keeps its readahead in buffers from then on.
	noPipes bool
}

type chunk struct {
	off    int64
	n      int
	buf    *[]byte    // the chunk's bytes, filled by a GET; or
	pipe   *chunkPipe // the GET's body streaming through a pipe
	err    error
	done   chan struct{} // the GET is over (for a pipe: all bytes went in)
	cancel context.CancelFunc
	// refs are the reader's own hold (until it drops the chunk) and one
	// per reply that still has to be written to the kernel.
	refs atomic.Int32
}

// unref drops one hold; the last returns the buffer once the GET is done.
func (c *chunk) unref(f *FS) {
	if c.refs.Add(-1) != 0 {
		return
	}
	if c.pipe != nil {
		// Only now, with no READ left taking from it: stop the GET and
		// close the read end, which fails a filler blocked on the full
		// pipe with EPIPE.
		c.cancel()
		unix.Close(c.pipe.r)
		f.release(chunkPipeSize)
		return
	}
	select {
	case <-c.done:
		f.partBuffers().put(c.buf)
	default:
		go func() {
			<-c.done
			f.partBuffers().put(c.buf)
		}()
	}
}

func (c *chunk) end() int64 { return c.off + int64(c.n) }

// read reads from key at off, never past size, into a reply for the
// kernel: slices of the readahead chunks that hold the range (no copy;
// the reply holds them until it is sent), a pipe of bytes spliced out of
// the chunks' pipes, or dest filled by a GET.
func (r *reader) read(ctx context.Context, key, etag string, size int64, dest []byte, off int64) (fuse.ReadResult, int, error) {
	if off >= size {
		return fuse.ReadResultData(nil), 0, nil
	}
	want := int(min(int64(len(dest)), size-off))
	dest = dest[:want]
	r.mu.Lock()
	if etag != r.etag {
		r.dropAll() // the object changed: prefetched data is stale
		r.etag = etag
	}
	end := off + int64(want)
	if !r.sequential(off) {
		r.next, r.streak = end, 0
		r.dropAll()
		r.mu.Unlock()
		return r.direct(ctx, key, etag, size, dest, off)
	}
	r.next = max(r.next, end)
	r.streak++
	if r.streak < 2 {
		r.mu.Unlock()
		return r.direct(ctx, key, etag, size, dest, off)
	}
	r.dropBefore(off - reorderSlack)
	r.dropFailed()
	r.fill(key, size, off)
	if r.pipes() {
		// Taking from a pipe may wait for a READ this one overtook,
		// which needs the lock: hold the chunks, not the reader.
		var held []*chunk
		for _, c := range r.chunks {
			if c.end() > off && c.off < end {
				c.refs.Add(1)
				held = append(held, c)
			}
		}
		r.mu.Unlock()
		defer func() {
			for _, c := range held {
				c.unref(r.fsys)
			}
		}()
		return r.takeFromPipes(ctx, key, etag, held, dest, off)
	}
	defer r.mu.Unlock()
	reply := &chunkReply{fsys: r.fsys}
	got := 0
	for _, c := range r.chunks {
		if got == want {
			break
		}
		pos := off + int64(got)
		if pos < c.off || pos >= c.end() {
			continue
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			reply.Done()
			return nil, 0, ctx.Err()
		}
		if c.err != nil {
			err := c.err
			reply.Done()
			r.dropAll()
			return nil, 0, err
		}
		part := (*c.buf)[pos-c.off : min(c.n, int(pos-c.off)+want-got)]
		reply.add(c, part)
		got += len(part)
	}
	if got < want {
		// Not (or not all) prefetched: the rest comes into dest.
		rest := dest[got:]
		if err := r.fsys.getInto(ctx, key, etag, rest, off+int64(got)); err != nil {
			reply.Done()
			return nil, 0, err
		}
		reply.slices = append(reply.slices, rest)
	}
	return reply, want, nil
}

// takeFromPipes answers a READ with the bytes of chunks' pipes, moved
// into a reply pipe (or, when it fills, copied). Bytes no pipe holds any
// more, or that a failed GET never brought, come with a GET of their own
// into dest: a rare path, for a READ overtaken for longer than
// reorderWait or a chunk whose connection broke.
func (r *reader) takeFromPipes(ctx context.Context, key, etag string, chunks []*chunk, dest []byte, off int64) (fuse.ReadResult, int, error) {
	want := len(dest)
	reply := newPipeReply(dest)
	for _, c := range chunks {
		pos := off + int64(reply.got)
		if reply.got == want || pos < c.off {
			break
		}
		k := min(want-reply.got, int(c.end()-pos))
		if err := c.take(ctx, pos, k, reply, r.fsys.reorderWait); err != nil {
			if ctx.Err() != nil {
				reply.Done()
				return nil, 0, ctx.Err()
			}
			break // the rest with a GET
		}
	}
	if reply.got == want && !reply.spilled {
		return reply, want, nil
	}
	defer reply.Done()
	if !reply.spilled {
		if err := reply.spill(); err != nil {
			return nil, 0, err
		}
	} else if reply.got == want {
		r.fsys.stats.CopiedReplies.Add(1)
	}
	if got := reply.got; got < want {
		if err := r.fsys.getInto(ctx, key, etag, dest[got:], off+int64(got)); err != nil {
			return nil, 0, err
		}
	}
	return sliceReply(dest), want, nil
}

// reorderSlack is how far behind or ahead of the readahead window a read
// may land and still count as sequential. The kernel keeps several READs
// of one readahead window in flight and they reach us in any order; a
// strict "continues where the last one ended" would take each reordered
// READ for a seek and throw the prefetched chunks away.
const reorderSlack = 4 << 20

// sequential reports whether a read at off continues the current stream:
// it starts where the last one ended, or falls within the readahead
// window give or take reorderSlack.
func (r *reader) sequential(off int64) bool {
	if off == r.next {
		return true
	}
	if len(r.chunks) == 0 {
		return false
	}
	return off >= r.chunks[0].off-reorderSlack && off < r.chunks[len(r.chunks)-1].end()+reorderSlack
}

// fill starts chunks until Concurrency are in flight ahead of off.
func (r *reader) fill(key string, size, off int64) {
	if r.chunkSize == 0 {
		r.chunkSize = minChunk
	}
	for len(r.chunks) < r.fsys.opts.Concurrency {
		start := off
		if len(r.chunks) > 0 {
			start = r.chunks[len(r.chunks)-1].end()
		}
		if start >= size {
			return
		}
		n := int(min(int64(r.chunkSize), size-start))
		// Chunks end on MiB boundaries: S3 servers read and check whole
		// blocks (MinIO's are 1 MiB), so a GET starting mid-block reads
		// that block again. Measured: 1 GiB cold reads 10% faster.
		if e := (start + int64(n)) / minChunk * minChunk; e > start && e < size {
			n = int(e - start)
		}
		c := &chunk{off: start, n: n, done: make(chan struct{})}
		if r.pipes() {
			if !r.fsys.tryReserve(chunkPipeSize) {
				return
			}
			p, err := newChunkPipe(start)
			if err != nil {
				r.fsys.release(chunkPipeSize)
				r.noPipes = true
				r.dropAll()
				return
			}
			c.pipe = p
		} else if c.buf = r.fsys.partBuffers().tryGet(); c.buf == nil {
			return
		}
		r.chunkSize = min(2*r.chunkSize, r.fsys.opts.PartSize)
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		c.refs.Store(1)
		r.chunks = append(r.chunks, c)
		etag := r.etag
		go func() {
			defer close(c.done)
			if c.pipe != nil {
				c.err = r.fsys.fillPipe(ctx, key, etag, c)
			} else {
				c.err = r.fsys.getInto(ctx, key, etag, (*c.buf)[:n], start)
			}
		}()
	}
}

// pipes reports whether readahead goes through pipes.
func (r *reader) pipes() bool { return r.fsys.splicing && !r.noPipes }

// dropFailed drops pipe chunks whose GET failed: READs got their bytes
// with GETs of their own, and the next fill starts the chunk again.
func (r *reader) dropFailed() {
	kept := r.chunks[:0]
	for _, c := range r.chunks {
		select {
		case <-c.done:
			if c.err != nil && c.pipe != nil {
				r.free(c)
				continue
			}
		default:
		}
		kept = append(kept, c)
	}
	clear(r.chunks[len(kept):])
	r.chunks = kept
}

func (r *reader) dropBefore(off int64) {
	i := 0
	for i < len(r.chunks) && r.chunks[i].end() <= off {
		r.free(r.chunks[i])
		i++
	}
	r.chunks = r.chunks[i:]
}

func (r *reader) dropAll() {
	for _, c := range r.chunks {
		r.free(c)
	}
	r.chunks = nil
	r.chunkSize = 0
}

// free drops the reader's hold on a chunk. A buffer's GET stops now and
// the buffer goes back to the pool once no reply still being sent uses
// it; a pipe's GET stops once no READ takes from it (unref).
func (r *reader) free(c *chunk) {
	if c.pipe == nil {
		c.cancel()
	}
	c.unref(r.fsys)
}

func (r *reader) close() {
	r.mu.Lock()
	r.dropAll()
	r.mu.Unlock()
}

// direct answers a read that is not (yet) sequential with a GET of just
// its range, or from the read cache, which keeps what such GETs bring, or
// from what the file's lookup peeked.
func (r *reader) direct(ctx context.Context, key, etag string, size int64, dest []byte, off int64) (fuse.ReadResult, int, error) {
	if etag != "" && r.fsys.peeked.take(key, etag, dest, off) {
		r.fsys.stats.BytesFromPeeks.Add(int64(len(dest)))
		return sliceReply(dest), len(dest), nil
	}
	c := r.fsys.cache
	if c != nil && etag != "" && c.ReadAt(key, etag, size, dest, off) {
		r.fsys.stats.BytesFromCache.Add(int64(len(dest)))
		return sliceReply(dest), len(dest), nil
	}
	if err := r.fsys.getInto(ctx, key, etag, dest, off); err != nil {
		return nil, 0, err
	}
	// The GET was conditional on etag: the cache never holds one
	// version's bytes under another's ETag.
	if c != nil && etag != "" {
		c.Store(key, etag, size, dest, off)
	}
	return sliceReply(dest), len(dest), nil
}

// getInto reads exactly len(dest) bytes of version etag of key at off.
func (f *FS) getInto(ctx context.Context, key, etag string, dest []byte, off int64) error {
	body, err := f.store.Get(ctx, key, etag, off, int64(len(dest)))
	if err != nil {
		return err
	}
	defer body.Close()
	if _, err := io.ReadFull(body, dest); err != nil {
		return fmt.Errorf("read %q at %d: %w", key, off, err)
	}
	return nil
}
