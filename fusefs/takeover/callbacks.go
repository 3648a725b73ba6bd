package takeover

import (
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// callbacks carry the inner filesystem's notifications to the kernel,
// with its node ids translated to the kernel's. A node the kernel was
// never given is one it has nothing cached of: ENOENT, as the kernel
// itself answers.
type callbacks struct{ t *FS }

var _ fs.ServerCallbacks = callbacks{}

// kernelID is the kernel's id for inner node id, and the server.
func (c callbacks) kernelID(inner uint64) (uint64, *fuse.Server, fuse.Status) {
	s := c.t.server.Load()
	if s == nil {
		return 0, nil, fuse.ENOSYS
	}
	c.t.mu.Lock()
	id, ok := c.t.byInner[inner]
	c.t.mu.Unlock()
	if !ok {
		return 0, nil, fuse.ENOENT
	}
	return id, s, fuse.OK
}

func (c callbacks) DeleteNotify(parent, child uint64, name string) fuse.Status {
	p, s, st := c.kernelID(parent)
	if !st.Ok() {
		return st
	}
	ch, _, st := c.kernelID(child)
	if !st.Ok() {
		return s.EntryNotify(p, name)
	}
	return s.DeleteNotify(p, ch, name)
}

func (c callbacks) EntryNotify(parent uint64, name string) fuse.Status {
	p, s, st := c.kernelID(parent)
	if !st.Ok() {
		return st
	}
	return s.EntryNotify(p, name)
}

func (c callbacks) InodeNotify(node uint64, off, length int64) fuse.Status {
	id, s, st := c.kernelID(node)
	if !st.Ok() {
		return st
	}
	return s.InodeNotify(id, off, length)
}

func (c callbacks) InodeRetrieveCache(node uint64, offset int64, dest []byte) (int, fuse.Status) {
	id, s, st := c.kernelID(node)
	if !st.Ok() {
		return 0, st
	}
	return s.InodeRetrieveCache(id, offset, dest)
}

func (c callbacks) InodeNotifyStoreCache(node uint64, offset int64, data []byte) fuse.Status {
	id, s, st := c.kernelID(node)
	if !st.Ok() {
		return st
	}
	return s.InodeNotifyStoreCache(id, offset, data)
}
