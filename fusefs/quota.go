package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A volume's capacity, enforced (Options.Capacity). S3 has no size, so
// the mount keeps one: what the store holds under the prefix, summed from
// a listing, plus what writers here grew files by and have not uploaded.
// A write that would pass the capacity writes what fits and then fails
// with ENOSPC, as a full disk does, so no object holds part of what a
// writer meant; statfs shows capacity, used and available.
//
// Several mounts of one volume (pods on several nodes) count each
// other's uploads at their next sum: every QuotaRefresh, before a mount's
// own growth since its last sum passes a slack (a sixteenth of the
// capacity, at least 1 MiB), and before a refusal when the count may be
// stale. So N mounts together can pass the capacity by at most, for each
// of N-1 of them, one slack plus what it held written and not uploaded
// (open files; see TestQuotaSharedOvershootIsBounded).

// DefaultQuotaRefresh is Options.QuotaRefresh when none is given.
const DefaultQuotaRefresh = 30 * time.Second

// staleAfter is how old a sum may be before a refusal sums again: a
// volume kept full is not listed on every write.
const staleAfter = 2 * time.Second

type quota struct {
	fsys *FS
	// mu orders reservations (a check then an add) and sums.
	mu sync.Mutex
	// summing keeps sums one at a time.
	summing sync.Mutex
	limit   atomic.Int64 // bytes; 0: no quota
	// stored is the store's bytes: the last sum plus this mount's
	// uploads and deletes since; reserved is what files being written
	// here grew beyond the versions stored (quotaCharge).
	stored, reserved atomic.Int64
	// sinceSum is reserved since the last sum; summedAt is when it
	// ended; unknown is set by a change of unknown size (a delete of an
	// object never looked up, a rename over one).
	sinceSum atomic.Int64
	summedAt time.Time
	unknown  atomic.Bool
	summed   chan struct{} // closed when the first sum ends
	wake     chan struct{} // asks the refresher for a sum now
	stop     context.CancelFunc
	done     chan struct{}
}

// quotaCharge is a file's part of quota.reserved: while its content here
// differs from the stored version (base bytes), the largest size it
// reached (top) is counted.
type quotaCharge struct {
	on        bool
	base, top int64
}

func newQuota(f *FS) *quota {
	q := &quota{fsys: f, summed: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	q.limit.Store(f.opts.Capacity)
	var ctx context.Context
	ctx, q.stop = context.WithCancel(context.Background())
	go q.refresh(ctx)
	return q
}

// close ends the refresher.
func (q *quota) close() {
	q.stop()
	<-q.done
}

// refresh sums at once, then every QuotaRefresh or when woken.
func (q *quota) refresh(ctx context.Context) {
	defer close(q.done)
	first := true
	t := time.NewTicker(q.fsys.opts.QuotaRefresh)
	defer t.Stop()
	for {
		q.sum(ctx)
		if first {
			close(q.summed)
			first = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-q.wake:
		}
	}
}

// sum lists the volume and takes the total as stored, and the capacity
// from CapacitySource (a volume expanded elsewhere). Changes made here
// while it lists are counted again on top: the count errs towards full
// until the next sum.
func (q *quota) sum(ctx context.Context) {
	q.summing.Lock()
	defer q.summing.Unlock()
	if src := q.fsys.opts.CapacitySource; src != nil {
		if c, err := src(ctx); err == nil && c > 0 {
			q.setLimit(c)
		} else if err != nil {
			q.fsys.opts.Logger.Debug("quota: cannot read the volume's recorded capacity; keeping the one known", "err", err)
		}
	}
	before := q.stored.Load()
	q.unknown.Store(false)
	sinceBefore := q.sinceSum.Load()
	var total int64
	for e, err := range q.fsys.store.List(ctx, q.fsys.opts.Prefix, "", true) {
		if err != nil {
			if ctx.Err() == nil {
				q.unknown.Store(true)
				q.fsys.opts.Logger.Warn("quota: cannot sum the volume's usage; keeping the last count", "err", err)
			}
			return
		}
		if !e.IsPrefix() {
			total += e.Size
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stored.Add(total - before)
	q.sinceSum.Add(-sinceBefore)
	q.summedAt = time.Now()
}

// setLimit changes the capacity (SetCapacity, an expansion).
func (q *quota) setLimit(c int64) {
	if old := q.limit.Swap(c); old != c {
		q.fsys.opts.Logger.Info("quota: capacity changed", "from", old, "to", c)
	}
}

// reserve counts up to need more bytes and says how many it counted:
// fewer when the capacity would be passed.
func (q *quota) reserve(ctx context.Context, need int64) int64 {
	if need <= 0 {
		return need
	}
	<-q.summed
	q.mu.Lock()
	defer q.mu.Unlock()
	grant := need
	if limit := q.limit.Load(); limit > 0 {
		short := q.available() < need && (q.unknown.Load() || time.Since(q.summedAt) > staleAfter)
		if short || q.sinceSum.Load()+need > q.slack() {
			// Deletes elsewhere may have made room; uploads elsewhere
			// may have taken it.
			q.mu.Unlock()
			q.sum(ctx)
			q.mu.Lock()
		}
		grant = max(0, min(need, q.available()))
	}
	q.reserved.Add(grant)
	if q.sinceSum.Add(grant) > q.slack()/2 {
		select {
		case q.wake <- struct{}{}: // sum before the writer has to wait for one
		default:
		}
	}
	return grant
}

// available is what the capacity leaves, or less than zero when passed.
func (q *quota) available() int64 {
	return q.limit.Load() - q.stored.Load() - q.reserved.Load()
}

// slack is how much a mount writes between sums.
func (q *quota) slack() int64 {
	return max(q.limit.Load()/16, 1<<20)
}

// settle moves a charge to stored once its content is uploaded as size
// bytes (or, with uploaded false, drops it: the content is gone).
func (q *quota) settle(c *quotaCharge, uploaded bool, size int64) {
	if !c.on {
		if uploaded {
			q.unknown.Store(true) // restored from the journal: its earlier size is not known
		}
		return
	}
	// Stored first: between the two, the count errs towards full.
	if uploaded {
		q.stored.Add(size - c.base)
	}
	q.reserved.Add(c.base - c.top)
	*c = quotaCharge{}
}

// deleted counts an object's deletion; size < 0 when not known.
func (q *quota) deleted(size int64) {
	if size < 0 {
		q.unknown.Store(true)
		return
	}
	q.stored.Add(-size)
}

// used is the bytes counted.
func (q *quota) used() int64 { return max(0, q.stored.Load()+q.reserved.Load()) }

// SetCapacity changes a live mount's capacity (a volume expanded); 0
// lifts the quota. It has no effect on a mount made without one.
func (f *FS) SetCapacity(bytes int64) {
	if f.quota != nil {
		f.quota.setLimit(bytes)
	}
}

// firstSumWait bounds how long Usage waits for the count a mount starts
// with: statfs on a new mount shows what the volume holds, unless the
// endpoint is too slow to list it.
const firstSumWait = 5 * time.Second

// Usage is the capacity and the bytes counted against it (0, 0 without a
// quota).
func (f *FS) Usage() (capacity, used int64) {
	if f.quota == nil {
		return 0, 0
	}
	t := time.NewTimer(firstSumWait)
	defer t.Stop()
	select {
	case <-f.quota.summed:
	case <-t.C:
	}
	return f.quota.limit.Load(), f.quota.used()
}

// beginChargeLocked starts the file's charge, at the size it has now,
// before a change to its content.
func (n *fileNode) beginChargeLocked() {
	if n.fsys.quota == nil || n.charge.on {
		return
	}
	n.charge = quotaCharge{on: true, base: n.size(), top: n.size()}
}

// fitLocked counts length bytes written at off and says how many of them
// the capacity lets in: the first ones, all unless the volume is full.
func (n *fileNode) fitLocked(ctx context.Context, off int64, length int) int {
	n.beginChargeLocked() // again: making room may have uploaded the file
	q, end := n.fsys.quota, off+int64(length)
	if q == nil || end <= n.charge.top {
		return length
	}
	need := end - n.charge.top
	grant := q.reserve(ctx, need)
	fit := length - int(min(int64(length), need-grant))
	if fit == 0 {
		// Nothing of the write fits (past a hole, say): it reserves
		// nothing either.
		q.reserved.Add(-grant)
		return 0
	}
	n.charge.top += grant
	return fit
}

// extendLocked counts the file growing to size by truncate(2), which
// the capacity lets happen whole or not at all.
func (n *fileNode) extendLocked(ctx context.Context, size int64) bool {
	n.beginChargeLocked()
	q := n.fsys.quota
	if q == nil || size <= n.charge.top {
		return true
	}
	need := size - n.charge.top
	if grant := q.reserve(ctx, need); grant < need {
		q.reserved.Add(-grant)
		return false
	}
	n.charge.top = size
	return true
}

// settleChargeLocked ends the file's charge: its content was uploaded as
// size bytes, or (uploaded false) is dropped.
func (n *fileNode) settleChargeLocked(uploaded bool, size int64) {
	if n.fsys.quota != nil {
		n.fsys.quota.settle(&n.charge, uploaded, size)
	}
}

// removedSize is what removing name from d (a delete, a rename over it)
// takes off the count: the stored size of f, its node when one was looked
// up, or of the listed object; -1 when not known, 0 when nothing is
// there. Call it before entering the key gate: it takes f's lock, which a
// sync waiting in the gate for that key holds.
func (d *dirNode) removedSize(f *fileNode, name string) int64 {
	if d.fsys.quota == nil {
		return 0
	}
	if f != nil {
		return f.storedSize()
	}
	switch e, found, known := d.cached(name); {
	case found && !e.isDir:
		return e.obj.Size
	case !known:
		return -1
	}
	return 0
}

// countRemoved counts an object of size bytes removed (removedSize).
func (f *FS) countRemoved(size int64) {
	if f.quota != nil && size != 0 {
		f.quota.deleted(size)
	}
}

// storedSize is the size of the version the store holds.
func (n *fileNode) storedSize() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.charge.on:
		return n.charge.base
	case n.stored && !n.upload.pending():
		return n.attr.size
	case n.stored:
		return -1
	}
	return 0
}
