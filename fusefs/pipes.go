package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs/store"
)

// When the store's GET bodies can splice (plain HTTP), readahead chunks
// are pipes instead of buffers: a filler moves the body from the socket
// into the chunk's pipe, a READ moves its bytes from there into a reply
// pipe, and go-fuse splices that into /dev/fuse. The bytes are copied
// once, by the kernel into the page cache, instead of three times; the
// daemon's CPU per GiB read fell by a quarter.

// chunkPipeSize is the capacity asked for each chunk's pipe: the most an
// unprivileged process may ask (fs.pipe-max-size's default). Measured on
// a 1 GiB cold read, 4 MiB pipes were slower: a few MiB in flight stay in
// the CPU's cache between the socket and the page cache.
const chunkPipeSize = 1 << 20

// MaxRead is the largest READ the kernel sends (and WRITE: go-fuse has
// one setting for both). go-fuse splices a reply
// through one pipe that must hold its header, its data and a spare page,
// and pipes are at most 1 MiB (fs.pipe-max-size) unless privileged.
const MaxRead = chunkPipeSize - 2*4096

// reorderWait is how long a READ that overtook an earlier one waits for
// it to take its bytes out of the pipe before throwing them away (the
// earlier READ then GETs them). The earlier READ is normally being served
// by another thread already: the wait is microseconds.
const reorderWait = 20 * time.Millisecond

// errTaken means the bytes a READ wanted are no longer in the pipe.
var errTaken = errors.New("bytes already taken from the pipe")

// chunkPipe is a readahead chunk's pipe. Bytes enter at the back (the
// filler) and leave at the front (READs, one at a time, in order).
type chunkPipe struct {
	r, w int // the write end blocks when the pipe is full

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever the state below moves
	head    int64         // object offset of the pipe's first byte
	filled  int64         // object offset up to which bytes went in
	taking  bool          // a READ is moving bytes out
}

func newChunkPipe(off int64) (*chunkPipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	// Best effort: past the per-user pipe quota a pipe keeps its default
	// size, which still works, in smaller steps.
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, chunkPipeSize)
	return &chunkPipe{r: fds[0], w: fds[1], head: off, filled: off, changed: make(chan struct{})}, nil
}

func (p *chunkPipe) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *chunkPipe) state() (head, filled int64, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.head, p.filled, p.changed
}

// closeReader closes the read end once no READ uses the chunk: a filler
// blocked on the full pipe then fails with EPIPE and stops.
func (p *chunkPipe) closeReader() { unix.Close(p.r) }

// fillPipe streams [c.off, c.end()) of key into c's pipe.
func (f *FS) fillPipe(ctx context.Context, key string, c *chunk) error {
	defer unix.Close(c.pipe.w)
	body, err := f.store.Get(ctx, key, c.off, int64(c.n))
	if err != nil {
		return err
	}
	defer body.Close()
	src, ok := body.(store.PipeSource)
	if !ok {
		src = &copyingSource{r: body}
	}
	for pos, end := c.off, c.end(); pos < end; {
		n, err := src.SpliceTo(c.pipe.w, int(end-pos))
		if n > 0 {
			pos += int64(n)
			f.stats.BytesSpliced.Add(int64(n))
			c.pipe.mu.Lock()
			c.pipe.filled = pos
			c.pipe.notifyLocked()
			c.pipe.mu.Unlock()
		}
		if err == io.EOF && pos < end {
			err = io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %q at %d: %w", key, pos, err)
		}
	}
	return nil
}

// copyingSource puts a body that cannot splice (a proxied response, or
// another store's) into the pipe by copying.
type copyingSource struct {
	r   io.Reader
	buf []byte
}

func (s *copyingSource) SpliceTo(fd int, max int) (int, error) {
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	n, err := s.r.Read(s.buf[:min(len(s.buf), max)])
	for b := s.buf[:n]; len(b) > 0; {
		m, werr := unix.Write(fd, b)
		if werr != nil {
			return 0, fmt.Errorf("write to pipe: %w", werr)
		}
		b = b[m:]
	}
	return n, err
}

// take moves the k bytes at pos out of c's pipe into dst (a pipe's write
// end). Bytes before pos belong to a READ that was overtaken: take waits
// up to wait (reorderWait) for it to take them, then discards them.
func (c *chunk) take(ctx context.Context, pos int64, k int, dst int, wait time.Duration) error {
	p := c.pipe
	var timeout <-chan time.Time
	p.mu.Lock()
	for {
		if p.head > pos {
			p.mu.Unlock()
			return errTaken
		}
		if !p.taking && (p.head == pos || timeout == expiredTimer) {
			break
		}
		if timeout == nil && p.head < pos {
			timeout = time.After(wait)
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			timeout = expiredTimer
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	p.taking = true
	skip := int(pos - p.head)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.taking = false
		p.notifyLocked()
		p.mu.Unlock()
	}()
	if skip > 0 {
		if err := c.move(ctx, skip, devNull()); err != nil {
			return err
		}
	}
	return c.move(ctx, k, dst)
}

// expiredTimer marks a reorder wait that ran out.
var expiredTimer = make(<-chan time.Time)

// move splices k bytes from the front of c's pipe to dst, waiting for the
// filler as needed. Only the READ that set p.taking calls it.
func (c *chunk) move(ctx context.Context, k int, dst int) error {
	p := c.pipe
	for k > 0 {
		head, filled, changed := p.state()
		if filled == head {
			select {
			case <-changed:
			case <-c.done:
				if _, filled, _ := p.state(); filled == head {
					if c.err != nil {
						return c.err
					}
					return io.ErrUnexpectedEOF
				}
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		n, err := unix.Splice(p.r, nil, dst, nil, int(min(filled-head, int64(k))), unix.SPLICE_F_NONBLOCK)
		if err != nil {
			return fmt.Errorf("splice from readahead pipe: %w", err)
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p.mu.Lock()
		p.head += n
		p.notifyLocked()
		p.mu.Unlock()
		k -= int(n)
	}
	return nil
}

// devNull is /dev/null, opened once for good: a raw descriptor, so no
// finalizer can close it under a splice.
var devNull = sync.OnceValue(func() int {
	fd, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		panic(fmt.Sprintf("open %s: %v", os.DevNull, err))
	}
	return fd
})

// pipeReply is a READ's answer held in a pipe, which go-fuse splices into
// /dev/fuse (its Stateful interface).
type pipeReply struct {
	pair *splice.Pair
	size int
}

var _ fuse.ReadResult = (*pipeReply)(nil)

func newPipeReply(size int) (*pipeReply, error) {
	pair, err := splice.Get()
	if err != nil {
		return nil, err
	}
	if err := pair.Grow(size + os.Getpagesize()); err != nil {
		splice.Drop(pair)
		return nil, err
	}
	return &pipeReply{pair: pair, size: size}, nil
}

func (r *pipeReply) Size() int { return r.size }

// Stateful hands go-fuse the pipe to splice from.
func (r *pipeReply) Stateful() (uintptr, int) { return r.pair.ReadFd(), r.size }

// Bytes is go-fuse's fallback when it cannot splice. If a splice was
// tried and failed, some bytes may be gone: the READ fails rather than
// come back short, which the kernel would take for the end of the file.
func (r *pipeReply) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < r.size {
		buf = make([]byte, r.size)
	}
	buf = buf[:r.size]
	if err := r.readInto(buf); err != nil {
		return nil, fuse.EIO
	}
	return buf, fuse.OK
}

// readInto reads exactly len(buf) bytes out of the pipe, which holds them
// all already (an empty pipe fails with EAGAIN rather than wait).
func (r *pipeReply) readInto(buf []byte) error {
	for n := 0; n < len(buf); {
		m, err := r.pair.Read(buf[n:])
		if err != nil {
			return fmt.Errorf("read reply pipe: %w", err)
		}
		if m == 0 {
			return fmt.Errorf("read reply pipe: %w", io.ErrUnexpectedEOF)
		}
		n += m
	}
	return nil
}

func (r *pipeReply) Done() {
	if r.pair != nil {
		splice.Done(r.pair)
		r.pair = nil
	}
}
