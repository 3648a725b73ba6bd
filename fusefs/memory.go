package fusefs

import (
	"context"
	"time"

	"github.com/objfuse/objfuse/fusefs/offheap"
)

// buffers hands out part-sized byte slices, mapped outside the Go heap
// (offheap) and reused, so that a long copy neither allocates an 8 MiB
// slice per part nor doubles each in the collector's headroom, and counted
// against the mount's memory limit so that many concurrent readers and
// writers stay bounded.
type buffers struct {
	fsys *FS
	pool *offheap.Pool
}

// idleBuffers is how long a part buffer no one uses stays mapped for the
// next: a mount that has stopped copying gives its memory back.
const idleBuffers = 10 * time.Second

func (f *FS) partBuffers() *buffers {
	f.bufOnce.Do(func() {
		f.bufs = &buffers{fsys: f, pool: offheap.NewPool(f.opts.PartSize, idleBuffers)}
	})
	return f.bufs
}

// MappedBufferBytes is the memory the mount's part and request buffers
// have mapped outside the Go heap: those in use and those kept for reuse.
func (f *FS) MappedBufferBytes() int64 {
	return f.partBuffers().pool.Mapped() + f.requestBuffers().mapped()
}

// tryReserve takes n bytes of the mount's memory limit if they are free
// now, for a buffer or a readahead pipe; release gives them back.
func (f *FS) tryReserve(n int64) bool {
	if !f.memory.TryAcquire(n) {
		return false
	}
	f.stats.BufferBytes.Add(n)
	return true
}

func (f *FS) release(n int64) {
	f.stats.BufferBytes.Add(-n)
	f.memory.Release(n)
}

// reserveWritten takes n bytes of the memory limit for written data that
// waits for its upload. When they are not free it waits for them, up to
// Options' firstBufferWait, but only while uploads under way hold at least n bytes,
// which they give back when they end: a writer closing files faster than
// they upload (asynchronous close) then slows to the upload rate instead
// of filling memory. Files merely held open give nothing back, and after
// a wait that failed (uploads stalled) no writer waits again until an
// upload has ended: both times the caller goes on on disk at once.
func (f *FS) reserveWritten(ctx context.Context, n int64) bool {
	if f.tryReserve(n) {
		return true
	}
	if f.uploadingBytes.Load() < n || f.memoryStalled.Load() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.waits.firstBufferWait)
	defer cancel()
	if err := f.memory.Acquire(ctx, n); err != nil {
		f.memoryStalled.Store(true)
		return false
	}
	f.stats.BufferBytes.Add(n)
	return true
}

// uploadStarted and uploadEnded bracket the upload of a file whose
// written data holds held bytes of the memory limit; uploadEnded comes
// after the memory was given back.
func (f *FS) uploadStarted(held int64) { f.uploadingBytes.Add(held) }

func (f *FS) uploadEnded(held int64) {
	f.uploadingBytes.Add(-held)
	f.memoryStalled.Store(false)
}

// tryGet returns a buffer if the memory limit allows one now.
func (b *buffers) tryGet() *[]byte {
	if !b.fsys.tryReserve(int64(b.fsys.opts.PartSize)) {
		return nil
	}
	return b.mapped()
}

// getForWrite returns a buffer for written data, waiting for memory as
// reserveWritten does; nil if there is none.
func (b *buffers) getForWrite(ctx context.Context) *[]byte {
	if !b.fsys.reserveWritten(ctx, int64(b.fsys.opts.PartSize)) {
		return nil
	}
	return b.mapped()
}

// mapped returns a buffer for memory reserved already, or gives the
// reservation back when the system has no memory to map (the caller
// goes on without: on disk, or without readahead).
func (b *buffers) mapped() *[]byte {
	p, err := b.pool.Get()
	if err != nil {
		b.fsys.opts.Logger.Debug("no part buffer: the caller goes on without", "err", err)
		b.fsys.release(int64(b.fsys.opts.PartSize))
		return nil
	}
	return p
}

func (b *buffers) put(p *[]byte) {
	if p == nil {
		return
	}
	b.pool.Put(p)
	b.fsys.release(int64(b.fsys.opts.PartSize))
}
