package fusefs

import (
	"container/list"
	"sync"
	"time"
)

// The bytes a lookup's peek brought wait in memory for the file's first
// READ, which follows within milliseconds when lookups peek (a data
// loader opens what it looks up): handed over so, a file costs no local
// file of the read cache (a create, a write, a read and later an unlink,
// about a fifth of the mounter's CPU in the loader row). They are charged
// to the mount's memory limit; when it has no room, they go to the read
// cache as before, and a READ of bytes the peek did not bring is sent to
// the read cache or a GET. Held bytes go once a READ took their end (a
// small first read leaves the rest for the next), once peekedTTL passed,
// or when newer peeks need the room (peekedLimit); then a READ of them
// again, after the kernel dropped its pages, is a GET: unlike the read
// cache's, they are not kept for reading again.

// peekedLimit bounds the bytes peeks hold for READs to come: with 8
// readers that each open what they looked up, a few files each.
const peekedLimit = 32 * peekBytes

// peekedTTL is how long peeked bytes wait for a READ: a lookup whose
// open does not follow (a stat after all) must not hold memory.
const peekedTTL = 5 * time.Second

// peeked holds peeked bytes by object version until a READ takes them.
type peeked struct {
	fsys *FS
	ttl  time.Duration // peekedTTL; tests shorten it

	mu     sync.Mutex
	byID   map[string]*list.Element // of *peekedBytes, by peekedID
	order  list.List                // oldest first
	held   int64
	expiry *time.Timer // runs while anything is held
	closed bool        // the FS closed: nothing more is held
}

// peekedBytes are the first bytes of one object version.
type peekedBytes struct {
	id   string
	buf  *[]byte // of peekBuffers, given back when the bytes go
	data []byte  // the start of *buf
	at   time.Time
}

// peekBuffers are the buffers peeks read into, reused from peek to peek:
// a data loader peeks file after file, and a new buffer for each would
// have the collector run every few files (a fifth of the mounter's CPU).
var peekBuffers = sync.Pool{New: func() any { b := make([]byte, peekBytes); return &b }}

// peekedID names an object version. Bytes are only ever handed to a
// READ of the version whose ETag they were peeked under.
func peekedID(key, etag string) string { return key + "\x00" + etag }

// keep holds the first n bytes of buf, the first bytes of version etag of
// key, for a READ to come, and reports whether it could: false when the
// memory limit has no room for them now. Kept, buf is the peek's, back to
// peekBuffers when its bytes go; not kept, it stays the caller's.
func (p *peeked) keep(key, etag string, buf *[]byte, size int) bool {
	n := int64(size)
	if n == 0 || n > peekedLimit || !p.fsys.tryReserve(n) {
		return false
	}
	id := peekedID(key, etag)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.fsys.release(n)
		return false
	}
	if p.byID == nil {
		p.byID = map[string]*list.Element{}
	}
	if e, ok := p.byID[id]; ok {
		p.dropLocked(e) // peeked again: the newer bytes are as good
	}
	for p.held+n > peekedLimit {
		p.dropLocked(p.order.Front())
	}
	p.byID[id] = p.order.PushBack(&peekedBytes{id: id, buf: buf, data: (*buf)[:size], at: time.Now()})
	p.held += n
	if p.expiry == nil {
		p.expiry = time.AfterFunc(p.ttl, p.expire)
	}
	return true
}

// take copies the peeked bytes of version etag of key at off into dest
// when they hold all of it. Once a READ took their end they go (the
// kernel keeps what it read in its page cache); a READ of their start
// only (a program's small first read) leaves them for the next.
func (p *peeked) take(key, etag string, dest []byte, off int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byID[peekedID(key, etag)]
	if !ok {
		return false
	}
	b := e.Value.(*peekedBytes)
	if off < 0 || off+int64(len(dest)) > int64(len(b.data)) {
		return false
	}
	copy(dest, b.data[off:])
	if off+int64(len(dest)) == int64(len(b.data)) {
		p.dropLocked(e)
	}
	return true
}

// expire drops what waited peekedTTL, and runs again while anything is
// held.
func (p *peeked) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for e := p.order.Front(); e != nil && time.Since(e.Value.(*peekedBytes).at) >= p.ttl; e = p.order.Front() {
		p.dropLocked(e)
	}
	p.expiry = nil
	if e := p.order.Front(); e != nil {
		p.expiry = time.AfterFunc(p.ttl-time.Since(e.Value.(*peekedBytes).at), p.expire)
	}
}

// close drops what is held and holds nothing more (FS.Close).
func (p *peeked) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.expiry != nil {
		p.expiry.Stop()
		p.expiry = nil
	}
	for e := p.order.Front(); e != nil; e = p.order.Front() {
		p.dropLocked(e)
	}
}

// dropLocked lets the bytes of e go, giving their memory back.
func (p *peeked) dropLocked(e *list.Element) {
	b := p.order.Remove(e).(*peekedBytes)
	delete(p.byID, b.id)
	p.held -= int64(len(b.data))
	p.fsys.release(int64(len(b.data)))
	peekBuffers.Put(b.buf)
}

// heldBytes is what the peeks hold now (tests).
func (p *peeked) heldBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}
