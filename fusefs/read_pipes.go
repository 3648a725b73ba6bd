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
	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs/store"
)

// When the store's GET bodies can splice (plain HTTP), readahead chunks
// are pipes instead of buffers: a filler moves the body from the socket
// into the chunk's pipe, a READ moves its bytes from there into a reply
// pipe, and go-fuse splices that into /dev/fuse. The bytes are copied
// once, by the kernel into the page cache, instead of twice (socket into
// a buffer, buffer into the page cache); the daemon's CPU per GiB read
// fell by a third.

// chunkPipeSize is the capacity asked for each chunk's pipe: the most an
// unprivileged process may ask (fs.pipe-max-size's default). Measured on
// a 1 GiB cold read, 4 MiB pipes were slower: a few MiB in flight stay in
// the CPU's cache between the socket and the page cache.
const chunkPipeSize = 1 << 20

// MaxRead is the largest READ the kernel sends (and WRITE: go-fuse has
// one setting for both). go-fuse splices a reply through one pipe that
// must hold its header, its data and a spare page, and it grows pipes to
// at most fs.pipe-max-size (1 MiB by default).
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
//
// A pipe's capacity is counted in slots, not bytes: a slot holds one
// piece of a socket's data, from a 1448-byte packet on a 1500-MTU network
// to tens of KiB on loopback. So nothing here assumes how many bytes a
// pipe holds: the filler blocks when the pipe is full, and a reply that
// runs out of room is finished by copying (pipeReply).
type chunkPipe struct {
	r, w int // the write end blocks when the pipe is full

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever the state below moves
	head    int64         // object offset of the pipe's first byte
	filled  int64         // object offset up to which bytes went in
	taking  bool          // a READ is moving bytes out
}

// newChunkPipe returns a pipe of chunkPipeSize, or an error when the
// per-user pipe quota (or fs.pipe-max-size) does not allow one.
func newChunkPipe(off int64) (*chunkPipe, error) {
	r, w, err := newPipe(chunkPipeSize, 0)
	if err != nil {
		return nil, err
	}
	return &chunkPipe{r: r, w: w, head: off, filled: off, changed: make(chan struct{})}, nil
}

// newPipe returns a pipe of size bytes (its ends; flags for pipe2 besides
// O_CLOEXEC), or an error when the per-user pipe quota (or
// fs.pipe-max-size) does not allow one that size.
func newPipe(size, flags int) (r, w int, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|flags); err != nil {
		return -1, -1, fmt.Errorf("pipe: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, size); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return -1, -1, fmt.Errorf("pipe of %d bytes: %w", size, err)
	}
	return fds[0], fds[1], nil
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

// fillPipe streams [c.off, c.end()) of version etag of key into c's pipe.
func (f *FS) fillPipe(ctx context.Context, key, etag string, c *chunk) error {
	defer unix.Close(c.pipe.w)
	body, err := f.store.Get(ctx, key, etag, c.off, int64(c.n))
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

// take moves the k bytes at pos out of c's pipe into reply. Bytes before
// pos belong to a READ that was overtaken: take waits up to wait
// (reorderWait) for it to take them, then discards them.
func (c *chunk) take(ctx context.Context, pos int64, k int, reply *pipeReply, wait time.Duration) error {
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
		if err := c.move(ctx, skip, discard); err != nil {
			return err
		}
	}
	return c.move(ctx, k, reply.takeFrom)
}

// expiredTimer marks a reorder wait that ran out.
var expiredTimer = make(<-chan time.Time)

// move moves k bytes from the front of c's pipe with to (which takes up
// to n bytes from the pipe fd and says how many), waiting for the filler
// as needed. Only the READ that set p.taking calls it.
func (c *chunk) move(ctx context.Context, k int, to func(fd, n int) (int, error)) error {
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
		n, err := to(p.r, int(min(filled-head, int64(k))))
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p.mu.Lock()
		p.head += int64(n)
		p.notifyLocked()
		p.mu.Unlock()
		k -= n
	}
	return nil
}

// discard drops n bytes from the front of pipe fd.
func discard(fd, n int) (int, error) {
	m, err := unix.Splice(fd, nil, devNull(), nil, n, unix.SPLICE_F_NONBLOCK)
	if err != nil {
		return 0, fmt.Errorf("discard from readahead pipe: %w", err)
	}
	return int(m), nil
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

// pipeReply is a READ's answer, collected in a pipe that go-fuse splices
// into /dev/fuse (its Stateful interface) or, once the pipe is full or if
// there is none, in dest (spilled), answered as bytes.
//
// go-fuse moves the reply into a pipe of its own after the header, sized
// by bytes: at least the next power of two above size plus a header and
// a page. The reply's pipe has half as many slots, so its pieces always
// fit there; were they not to, go-fuse would send a short reply, which
// the kernel takes for the end of the file.
type pipeReply struct {
	r, w    int // -1 once spilled
	size    int
	dest    []byte
	got     int
	spilled bool
}

var _ fuse.ReadResult = (*pipeReply)(nil)

func newPipeReply(dest []byte) *pipeReply {
	r, w, err := newPipe(replySlots(len(dest))*4096, unix.O_NONBLOCK)
	return &pipeReply{r: r, w: w, size: len(dest), dest: dest, spilled: err != nil}
}

// fuseHeaderSize is the reply header go-fuse puts before the data.
const fuseHeaderSize = 16

// replySlots is the slot count of a reply's pipe: half the fewest go-fuse
// can have for it (the pages of size, a header and a spare page, rounded
// up to a power of two, as the kernel does).
func replySlots(size int) int {
	pages := (size + fuseHeaderSize + 4096 + 4095) / 4096
	gf := 1
	for gf < pages {
		gf *= 2
	}
	return gf / 2
}

// takeFrom moves up to n bytes from the front of pipe fd into the reply:
// spliced while its pipe has room, copied into dest after.
func (r *pipeReply) takeFrom(fd, n int) (int, error) {
	if !r.spilled {
		m, err := unix.Splice(fd, nil, r.w, nil, n, unix.SPLICE_F_NONBLOCK)
		if err == nil {
			r.got += int(m)
			return int(m), nil
		}
		if err != unix.EAGAIN { // EAGAIN: the reply's pipe is full
			return 0, fmt.Errorf("splice into reply: %w", err)
		}
		if err := r.spill(); err != nil {
			return 0, err
		}
	}
	m, err := unix.Read(fd, r.dest[r.got:r.got+n])
	if err != nil {
		return 0, fmt.Errorf("read readahead pipe: %w", err)
	}
	r.got += m
	return m, nil
}

// spill moves what the reply's pipe holds into dest; the rest of the
// reply is copied there.
func (r *pipeReply) spill() error {
	if r.spilled {
		return nil
	}
	err := readFull(r.r, r.dest[:r.got])
	r.close()
	r.spilled = true
	return err
}

func (r *pipeReply) close() {
	if r.r >= 0 {
		unix.Close(r.r)
		unix.Close(r.w)
		r.r, r.w = -1, -1
	}
}

func (r *pipeReply) Size() int { return r.size }

// Stateful hands go-fuse the pipe to splice from.
func (r *pipeReply) Stateful() (uintptr, int) { return uintptr(r.r), r.size }

// Bytes is go-fuse's fallback when it cannot splice. If a splice was
// tried and failed, some bytes may be gone: the READ fails rather than
// come back short, which the kernel would take for the end of the file.
func (r *pipeReply) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < r.size {
		buf = make([]byte, r.size)
	}
	buf = buf[:r.size]
	if err := readFull(r.r, buf); err != nil {
		return nil, fuse.EIO
	}
	return buf, fuse.OK
}

func (r *pipeReply) Done() { r.close() }

// readFull reads exactly len(buf) bytes from a pipe that holds them all
// already (a non-blocking pipe that runs dry fails rather than waits).
func readFull(fd int, buf []byte) error {
	for n := 0; n < len(buf); {
		m, err := unix.Read(fd, buf[n:])
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
