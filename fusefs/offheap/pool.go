// Package offheap hands out fixed-size byte buffers mapped outside the Go
// heap and reused rather than collected.
//
// Part buffers are the bulk of what a mounter holds while it copies (8
// MiB each, several per file in flight). In the Go heap each one costs
// twice its size: the collector lets the heap grow to twice what is live
// before it runs (GOGC=100), and pooled buffers (sync.Pool) are dropped at
// every second collection and allocated again. Closing that headroom with
// GOMEMLIMIT makes the collector run all the time instead. Mapped here,
// a buffer costs its pages and nothing else, and what a mounter's budget
// lets it hold is what it holds.
package offheap

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Pool is a free list of buffers of one size. Buffers given back stay
// mapped for reuse until they have been idle for the pool's idle time;
// then their memory goes back to the system. The caller bounds how many
// are out (the mount's memory limit): the pool holds at most that many.
type Pool struct {
	size int
	idle time.Duration
	// populated maps buffers with their pages present (NewPopulatedPool).
	populated bool

	mu    sync.Mutex
	free  []freeBuffer // oldest first: Get takes the newest, trim the oldest
	timer *time.Timer  // the next trim, while any buffer is free

	mapped atomic.Int64
}

type freeBuffer struct {
	b     *[]byte
	since time.Time
}

// NewPool returns a pool of buffers of size bytes that keeps a buffer
// given back for idle before unmapping it.
func NewPool(size int, idle time.Duration) *Pool {
	return &Pool{size: size, idle: idle}
}

// NewPopulatedPool is NewPool for buffers whose pages are all in memory
// from the start (MAP_POPULATE), not faulted in as they are first
// written: what the kernel copies FUSE requests into must not fault
// while the process is being killed (see third_party/go-fuse's
// prefault), and a buffer kept here stays so.
func NewPopulatedPool(size int, idle time.Duration) *Pool {
	return &Pool{size: size, idle: idle, populated: true}
}

// Size is the length of the pool's buffers.
func (p *Pool) Size() int { return p.size }

// Mapped is how many bytes the pool has mapped: buffers out and buffers
// free but not yet given back to the system.
func (p *Pool) Mapped() int64 { return p.mapped.Load() }

// Get returns a buffer of Size bytes, reused or newly mapped. Its bytes
// are whatever was last written to it. A buffer must go back with Put,
// and must not be touched after: it may be unmapped.
func (p *Pool) Get() (*[]byte, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1].b
		p.free[n-1] = freeBuffer{}
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if p.populated {
		flags |= unix.MAP_POPULATE
	}
	b, err := unix.Mmap(-1, 0, p.size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("map a buffer of %d bytes: %w", p.size, err)
	}
	p.mapped.Add(int64(p.size))
	mappedChanged(int64(p.size))
	return &b, nil
}

// Put gives b back to the pool.
func (p *Pool) Put(b *[]byte) {
	if b == nil {
		return
	}
	*b = (*b)[:p.size]
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, freeBuffer{b: b, since: time.Now()})
	if p.timer == nil {
		p.timer = time.AfterFunc(p.idle, p.trim)
	}
}

// trim unmaps the buffers idle for the pool's idle time, and comes back
// for the others.
func (p *Pool) trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	now := time.Now()
	n := 0
	for n < len(p.free) && now.Sub(p.free[n].since) >= p.idle {
		p.unmap(p.free[n].b)
		n++
	}
	p.free = append(p.free[:0], p.free[n:]...)
	if len(p.free) > 0 {
		p.timer = time.AfterFunc(p.idle-now.Sub(p.free[0].since), p.trim)
	}
}

// Close unmaps every free buffer. Buffers still out are the caller's bug:
// they stay mapped.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	for _, f := range p.free {
		p.unmap(f.b)
	}
	p.free = nil
}

func (p *Pool) unmap(b *[]byte) {
	if err := unix.Munmap(*b); err != nil {
		// Only a slice this pool did not map fails; keep counting it.
		return
	}
	p.mapped.Add(-int64(p.size))
	mappedChanged(-int64(p.size))
}
