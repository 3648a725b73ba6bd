package takeover

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// opened gives out a kernel handle for inner handle fh open on kernel
// node id with flags.
func (t *FS) opened(id, fh uint64, flags uint32, dir bool) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.nextHandle
	t.nextHandle++
	h := &handle{inner: fh, SavedHandle: SavedHandle{Node: id, Flags: flags, Dir: dir,
		// A new or truncated file is not in S3 until its first flush.
		Dirty: !dir && flags&(syscall.O_CREAT|syscall.O_TRUNC) != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY}}
	t.handles[k] = h
	t.record("%s", handleRecord(k, h.SavedHandle))
	return k
}

// innerHandle is the handle behind kernel handle fh (0: none), reviving
// it if a predecessor gave it out. A lost handle answers EIO, one that
// owes a failure answers it once.
func (t *FS) innerHandle(fh uint64) (*handle, fuse.Status) {
	if fh == 0 {
		return &handle{}, fuse.OK
	}
	t.mu.Lock()
	h, ok := t.handles[fh]
	t.mu.Unlock()
	if !ok {
		t.reviveMu.Lock()
		h, ok = t.reviveHandle(fh)
		t.reviveMu.Unlock()
	}
	if !ok {
		return nil, fuse.Status(syscall.EBADF)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case h.lost:
		return h, fuse.EIO
	case h.owes:
		h.owes, h.Dirty = false, false
		t.record("c %d", fh)
		return h, fuse.EIO
	}
	return h, fuse.OK
}

// reviveHandle opens a predecessor's handle again. Called with reviveMu
// held.
func (t *FS) reviveHandle(fh uint64) (*handle, bool) {
	t.mu.Lock()
	h, live := t.handles[fh]
	saved, ok := t.old.Handles[fh]
	t.mu.Unlock()
	if live {
		return h, true
	}
	if !ok {
		t.log.Error("the kernel used a file handle this mount never gave out", "handle", fh)
		return nil, false
	}
	h = &handle{SavedHandle: saved}
	if st := t.reopen(h); !st.Ok() {
		h.lost = true
		t.log.Warn("a file open before the mounter restarted cannot be opened again; its users get EIO", "file", t.pathOf(saved.Node), "err", st)
	} else {
		t.stats.RevivedHandles.Add(1)
	}
	if saved.Dirty {
		h.owes = !h.lost
		t.stats.LostHandles.Add(1)
		t.log.Error("writes to a file since its last flush were in the mounter that died and are lost; the next call of its writer fails with EIO, and the file holds what was last flushed",
			"file", t.pathOf(saved.Node))
	}
	t.mu.Lock()
	t.handles[fh] = h
	delete(t.old.Handles, fh)
	t.mu.Unlock()
	return h, true
}

// reopen opens h's node again as it was opened, less what only the
// first open should do (create, truncate).
func (t *FS) reopen(h *handle) fuse.Status {
	id, st := t.reviveNode(h.Node)
	if !st.Ok() {
		return st
	}
	in := fuse.OpenIn{InHeader: fuse.InHeader{NodeId: id}, Flags: h.Flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC)}
	var out fuse.OpenOut
	if h.Dir {
		st = t.inner.OpenDir(nil, &in, &out)
	} else {
		st = t.inner.Open(nil, &in, &out)
	}
	h.inner = out.Fh
	return st
}

// dirty notes a change to fh's file (a write, a truncate) before it goes
// in: if the process dies while it is in its memory, the successor must
// fail the handle. The change ends when ended is called.
func (t *FS) dirty(fh uint64, h *handle) (ended func()) {
	if fh == 0 {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h.changes++
	h.changing++
	if !h.Dirty {
		h.Dirty = true
		t.record("w %d", fh)
	}
	return func() {
		t.mu.Lock()
		h.changing--
		t.mu.Unlock()
	}
}

// flushMark is what a flush covers: the changes to its handle begun
// before it, unless one was under way (its bytes may go in after the
// flush took the file's content).
type flushMark struct {
	changes uint64
	whole   bool
}

// flushing marks a flush of h beginning.
func (t *FS) flushing(h *handle) flushMark {
	t.mu.Lock()
	defer t.mu.Unlock()
	return flushMark{changes: h.changes, whole: h.changing == 0}
}

// flushed notes that fh's writes are in S3, if the flush marked at mark
// covered them all: a change begun since, or under way then, may not be.
func (t *FS) flushed(fh uint64, h *handle, mark flushMark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h.Dirty && mark.whole && h.changes == mark.changes {
		h.Dirty = false
		t.record("c %d", fh)
	}
}

// released drops fh and returns its handle (nil if unknown or lost:
// nothing to release inside).
func (t *FS) released(fh uint64) *handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.handles[fh]
	if _, old := t.old.Handles[fh]; old {
		delete(t.old.Handles, fh)
		t.record("r %d", fh)
		return nil
	}
	if !ok {
		return nil
	}
	delete(t.handles, fh)
	t.record("r %d", fh)
	if h.lost {
		return nil
	}
	return h
}
