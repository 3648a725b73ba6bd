package fusefs

import (
	"sync"

	"github.com/objfuse/objfuse/fusefs/offheap"
)

// requestBuffers are the buffers go-fuse reads requests into, each a
// WRITE's largest (MaxRead and its header), mapped outside the Go heap
// (fuse.MountOptions.RequestBuffers). From go-fuse's own sync.Pool they
// were two thirds of a copying mounter's heap (about 4.7 MB of 7), which
// the collector then let grow to twice that, and dropped and made again
// (and wrote to every page of: prefault) at every other collection. Held
// here, one costs its pages while readers wait on the kernel or a WRITE
// uses it, and stays mapped for the next until idle. They are mapped
// with their pages present, as go-fuse asks of them (see prefault), once:
// written to once per page on every request read instead, they would
// cost 255 stores for each 4 KiB WRITE. Their number is
// go-fuse's readers plus the WRITEs in flight, which the kernel bounds.
type requestBuffers struct {
	pool *offheap.Pool

	mu  sync.Mutex
	out map[*byte]*[]byte // by first byte: go-fuse hands back slices
}

// requestBuffers is the pool of f's request buffers.
func (f *FS) requestBuffers() *requestBuffers {
	f.reqBufOnce.Do(func() {
		f.reqBufs = &requestBuffers{out: map[*byte]*[]byte{}}
	})
	return f.reqBufs
}

// Get is fuse.RequestBufferPool's: a mapped buffer of size bytes, or one
// in the heap if none can be mapped (the address space is full: a
// request must still be read).
func (r *requestBuffers) Get(size int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool == nil {
		r.pool = offheap.NewPopulatedPool(size, idleBuffers)
	}
	if size != r.pool.Size() {
		return make([]byte, size) // go-fuse asks for one size; never here
	}
	b, err := r.pool.Get()
	if err != nil {
		return make([]byte, size)
	}
	r.out[&(*b)[0]] = b
	return *b
}

// Put is fuse.RequestBufferPool's.
func (r *requestBuffers) Put(buf []byte) {
	if cap(buf) == 0 {
		return
	}
	first := &buf[:1][0]
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.out[first]
	if !ok {
		return // one from the heap
	}
	delete(r.out, first)
	r.pool.Put(b)
}

// mapped is what the pool has mapped.
func (r *requestBuffers) mapped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool == nil {
		return 0
	}
	return r.pool.Mapped()
}

// close unmaps the free buffers; go-fuse gives every buffer back before
// its server ends.
func (r *requestBuffers) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool != nil {
		r.pool.Close()
	}
}
