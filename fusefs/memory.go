package fusefs

import (
	"context"
	"sync"
)

// buffers hands out part-sized byte slices, pooled so that a long copy does
// not allocate a new 8 MiB slice per part, and counted against the mount's
// memory limit so that many concurrent readers and writers stay bounded.
type buffers struct {
	fsys *FS
	pool sync.Pool
}

func (f *FS) partBuffers() *buffers {
	f.bufOnce.Do(func() {
		size := f.opts.PartSize
		f.bufs = &buffers{fsys: f, pool: sync.Pool{New: func() any { b := make([]byte, size); return &b }}}
	})
	return f.bufs
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
	return b.pool.Get().(*[]byte)
}

// getForWrite returns a buffer for written data, waiting for memory as
// reserveWritten does; nil if there is none.
func (b *buffers) getForWrite(ctx context.Context) *[]byte {
	if !b.fsys.reserveWritten(ctx, int64(b.fsys.opts.PartSize)) {
		return nil
	}
	return b.pool.Get().(*[]byte)
}

func (b *buffers) put(p *[]byte) {
	if p == nil {
		return
	}
	b.pool.Put(p)
	b.fsys.release(int64(b.fsys.opts.PartSize))
}
