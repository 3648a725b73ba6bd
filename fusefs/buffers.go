package fusefs

import (
	"context"
	"sync"
	"time"
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
	if f.memoryStalled.Load() {
		f.memoryStalled.Store(false)
	}
}

// reserveWritten takes n bytes of the memory limit for written data that
// waits for its upload. When they are not free it waits for them, up to
// firstBufferWait, but only while uploads are under way, as those give
// memory back when they end: a writer closing files faster than they
// upload (asynchronous close) then slows to the upload rate instead of
// filling memory. Files merely held open free nothing, and after a wait
// that failed (uploads stalled) no writer waits again until memory is
// given back: both times the caller goes on on disk at once.
func (f *FS) reserveWritten(ctx context.Context, n int64) bool {
	if f.tryReserve(n) {
		return true
	}
	if f.uploading.Load() == 0 || f.memoryStalled.Load() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, firstBufferWait)
	defer cancel()
	if err := f.memory.Acquire(ctx, n); err != nil {
		f.memoryStalled.Store(true)
		return false
	}
	f.stats.BufferBytes.Add(n)
	return true
}

// tryGet returns a buffer if the memory limit allows one now.
func (b *buffers) tryGet() *[]byte {
	if !b.fsys.tryReserve(int64(b.fsys.opts.PartSize)) {
		return nil
	}
	return b.pool.Get().(*[]byte)
}

// get waits up to wait for a buffer; nil if none became free.
func (b *buffers) get(ctx context.Context, wait time.Duration) *[]byte {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.fsys.memory.Acquire(ctx, int64(b.fsys.opts.PartSize)); err != nil {
		return nil
	}
	b.fsys.stats.BufferBytes.Add(int64(b.fsys.opts.PartSize))
	return b.pool.Get().(*[]byte)
}

func (b *buffers) put(p *[]byte) {
	if p == nil {
		return
	}
	b.pool.Put(p)
	b.fsys.release(int64(b.fsys.opts.PartSize))
}
