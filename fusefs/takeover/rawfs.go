package takeover

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Every request's node ids and handles are the kernel's: each method
// translates them to the inner filesystem's on a copy of the input, and
// the node ids and handles in the reply back.

var _ fuse.RawFileSystem = (*FS)(nil)

func (t *FS) String() string      { return "takeover(" + t.inner.String() + ")" }
func (t *FS) SetDebug(debug bool) { t.inner.SetDebug(debug) }

// Init keeps the server for notifications. The inner filesystem is not
// given it: its notifications carry inner ids and go through callbacks.
func (t *FS) Init(s *fuse.Server) { t.server.Store(s) }
func (t *FS) OnUnmount()          { t.inner.OnUnmount() }

// header is h with the inner node id.
func (t *FS) header(h fuse.InHeader) (fuse.InHeader, fuse.Status) {
	id, st := t.innerNode(h.NodeId)
	h.NodeId = id
	return h, st
}

func (t *FS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return st
	}
	if st = t.inner.Lookup(cancel, &in, name, out); st.Ok() {
		t.entered(h.NodeId, name, out, false)
	}
	return st
}

// Forget passes the hand-over gate: the kernel never resends a FORGET
// (it wants no answer), so one held would be lost, and the successor
// would keep the node for the connection's life. Its record is what
// matters here, and it needs no answer written.
func (t *FS) Forget(id, nlookup uint64) {
	if inner, n := t.forget(id, nlookup); n > 0 {
		t.inner.Forget(inner, n)
	}
}

func (t *FS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if in.Fh_ != 0 {
		h, st := t.innerHandle(in.Fh_)
		if !st.Ok() {
			return st
		}
		c.Fh_ = h.inner
	}
	return t.inner.GetAttr(cancel, &c, out)
}

func (t *FS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if fh, ok := in.GetFh(); ok {
		h, st := t.innerHandle(fh)
		if !st.Ok() {
			return st
		}
		if in.Valid&fuse.FATTR_SIZE != 0 {
			defer t.dirty(fh, h)()
		}
		c.Fh = h.inner
	}
	return t.inner.SetAttr(cancel, &c, out)
}

func (t *FS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	defer t.changingNames()()
	st = t.inner.Mknod(cancel, &c, name, out)
	if st.Ok() {
		t.entered(in.NodeId, name, out, true)
	} else if st == eexist && t.mayBeDone(&in.InHeader) && t.madeBefore(cancel, c.NodeId, name, in.Mode, 0, out) {
		t.entered(in.NodeId, name, out, false)
		st = fuse.OK
	}
	return st
}

func (t *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	defer t.changingNames()()
	st = t.inner.Mkdir(cancel, &c, name, out)
	if st.Ok() {
		t.entered(in.NodeId, name, out, true)
	} else if st == eexist && t.mayBeDone(&in.InHeader) && t.madeBefore(cancel, c.NodeId, name, syscall.S_IFDIR, 0, out) {
		t.entered(in.NodeId, name, out, false)
		st = fuse.OK
	}
	return st
}

func (t *FS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.op()()
	return t.remove(cancel, h, name, t.inner.Unlink)
}

func (t *FS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.op()()
	return t.remove(cancel, h, name, t.inner.Rmdir)
}

func (t *FS) remove(cancel <-chan struct{}, h *fuse.InHeader, name string, op func(<-chan struct{}, *fuse.InHeader, string) fuse.Status) fuse.Status {
	in, st := t.header(*h)
	if !st.Ok() {
		return st
	}
	defer t.changingNames()()
	if st = op(cancel, &in, name); st.Ok() || t.removedBefore(h, st, name) {
		st = fuse.OK
		t.mu.Lock()
		t.unname(h.NodeId, name)
		t.mu.Unlock()
	}
	return st
}

func (t *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if c.Newdir, st = t.innerNode(in.Newdir); !st.Ok() {
		return st
	}
	defer t.changingNames()()
	if st = t.inner.Rename(cancel, &c, oldName, newName); !st.Ok() && !t.renamedBefore(cancel, &in.InHeader, &c, st, oldName, newName) {
		return st
	}
	st = fuse.OK
	t.mu.Lock()
	defer t.mu.Unlock()
	moved, ok := t.children[childKey{in.NodeId, oldName}]
	other, swapped := t.children[childKey{in.Newdir, newName}]
	if in.Flags&renameExchange != 0 && swapped {
		delete(t.children, childKey{in.Newdir, newName})
		t.rename(other, in.NodeId, oldName)
	}
	if ok {
		t.rename(moved, in.Newdir, newName)
	} else {
		t.unname(in.Newdir, newName)
	}
	return st
}

// renameExchange is RENAME_EXCHANGE: the two names swap.
const renameExchange = 2

func (t *FS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if c.Oldnodeid, st = t.innerNode(in.Oldnodeid); !st.Ok() {
		return st
	}
	defer t.changingNames()()
	st = t.inner.Link(cancel, &c, name, out)
	if st.Ok() {
		t.entered(in.NodeId, name, out, true)
	} else if st == eexist && t.mayBeDone(&in.InHeader) && t.madeBefore(cancel, c.NodeId, name, syscall.S_IFREG, c.Oldnodeid, out) {
		t.entered(in.NodeId, name, out, false)
		st = fuse.OK
	}
	return st
}

func (t *FS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, pointedTo, linkName string, out *fuse.EntryOut) fuse.Status {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return st
	}
	defer t.changingNames()()
	st = t.inner.Symlink(cancel, &in, pointedTo, linkName, out)
	if st.Ok() {
		t.entered(h.NodeId, linkName, out, true)
	} else if st == eexist && t.mayBeDone(h) && t.madeBefore(cancel, in.NodeId, linkName, syscall.S_IFLNK, 0, out) {
		t.entered(h.NodeId, linkName, out, false)
		st = fuse.OK
	}
	return st
}

func (t *FS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return nil, st
	}
	return t.inner.Readlink(cancel, &in)
}

func (t *FS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	return t.inner.Access(cancel, &c)
}

func (t *FS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return 0, st
	}
	return t.inner.GetXAttr(cancel, &in, attr, dest)
}

func (t *FS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return 0, st
	}
	return t.inner.ListXAttr(cancel, &in, dest)
}

func (t *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	return t.inner.SetXAttr(cancel, &c, attr, data)
}

func (t *FS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return st
	}
	return t.inner.RemoveXAttr(cancel, &in, attr)
}

func (t *FS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	defer t.changingNames()()
	st = t.inner.Create(cancel, &c, name, out)
	if st == eexist && t.mayBeDone(&in.InHeader) && t.madeBefore(cancel, c.NodeId, name, syscall.S_IFREG, 0, &out.EntryOut) {
		// O_EXCL, and the predecessor made it: open what it made.
		o := fuse.OpenIn{InHeader: fuse.InHeader{NodeId: out.NodeId}, Flags: in.Flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC)}
		if st = t.inner.Open(cancel, &o, &out.OpenOut); !st.Ok() {
			t.inner.Forget(out.NodeId, 1)
			return st
		}
		t.entered(in.NodeId, name, &out.EntryOut, false)
		out.Fh = t.opened(out.NodeId, out.Fh, in.Flags|syscall.O_CREAT, false)
		return fuse.OK
	}
	if st.Ok() {
		t.entered(in.NodeId, name, &out.EntryOut, true)
		out.Fh = t.opened(out.NodeId, out.Fh, in.Flags|syscall.O_CREAT, false)
	}
	return st
}

func (t *FS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if st = t.inner.Tmpfile(cancel, &c, out); st.Ok() {
		t.entered(in.NodeId, "", &out.EntryOut, true)
		out.Fh = t.opened(out.NodeId, out.Fh, in.Flags|syscall.O_CREAT, false)
	}
	return st
}

func (t *FS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.op()()
	return t.open(cancel, in, out, false)
}

func (t *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.op()()
	return t.open(cancel, in, out, true)
}

func (t *FS) open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut, dir bool) fuse.Status {
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if dir {
		st = t.inner.OpenDir(cancel, &c, out)
	} else {
		st = t.inner.Open(cancel, &c, out)
	}
	if st.Ok() {
		out.Fh = t.opened(in.NodeId, out.Fh, in.Flags, dir)
	}
	return st
}

// nodeAndHandle translates a request's node id and handle.
func (t *FS) nodeAndHandle(h fuse.InHeader, fh uint64) (fuse.InHeader, *handle, fuse.Status) {
	in, st := t.header(h)
	if !st.Ok() {
		return in, nil, st
	}
	hd, st := t.innerHandle(fh)
	return in, hd, st
}

func (t *FS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return nil, st
	}
	c.Fh = h.inner
	return t.inner.Read(cancel, &c, buf)
}

func (t *FS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return st
	}
	c.Fh = h.inner
	return t.inner.Lseek(cancel, &c, out)
}

func (t *FS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer t.op()()
	c, st := t.lk(in)
	if !st.Ok() {
		return st
	}
	return t.inner.GetLk(cancel, &c, out)
}

func (t *FS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer t.op()()
	c, st := t.lk(in)
	if !st.Ok() {
		return st
	}
	return t.inner.SetLk(cancel, &c)
}

func (t *FS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer t.op()()
	c, st := t.lk(in)
	if !st.Ok() {
		return st
	}
	return t.inner.SetLkw(cancel, &c)
}

func (t *FS) lk(in *fuse.LkIn) (fuse.LkIn, fuse.Status) {
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); st.Ok() {
		c.Fh = h.inner
	}
	return c, st
}

func (t *FS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer t.op()()
	if h := t.released(in.Fh); h != nil {
		c := *in
		c.NodeId, c.Fh = t.nodeOf(h), h.inner
		t.inner.Release(cancel, &c)
	}
}

func (t *FS) ReleaseDir(in *fuse.ReleaseIn) {
	defer t.op()()
	if h := t.released(in.Fh); h != nil {
		c := *in
		c.NodeId, c.Fh = t.nodeOf(h), h.inner
		t.inner.ReleaseDir(&c)
	}
}

// nodeOf is the inner node id of a live handle's node: a handle keeps
// its node's lookup, so the node is live.
func (t *FS) nodeOf(h *handle) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.nodes[h.Node]; ok {
		return n.inner
	}
	return 0
}

func (t *FS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer t.op()()
	c, ended, st := t.write(in)
	if !st.Ok() {
		return 0, st
	}
	defer ended()
	return t.inner.Write(cancel, &c, data)
}

func (t *FS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer t.op()()
	c, ended, st := t.write(in)
	if !st.Ok() {
		return 0, st
	}
	defer ended()
	return t.inner.Writev(cancel, &c, data)
}

// write translates a WRITE and notes its change beginning (dirty).
func (t *FS) write(in *fuse.WriteIn) (c fuse.WriteIn, ended func(), st fuse.Status) {
	c = *in
	var h *handle
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); st.Ok() {
		ended = t.dirty(in.Fh, h)
		c.Fh = h.inner
	}
	return c, ended, st
}

func (t *FS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer t.op()()
	c := *in
	var src, dst *handle
	var st fuse.Status
	if c.InHeader, src, st = t.nodeAndHandle(in.InHeader, in.FhIn); !st.Ok() {
		return 0, st
	}
	if c.NodeIdOut, st = t.innerNode(in.NodeIdOut); !st.Ok() {
		return 0, st
	}
	if dst, st = t.innerHandle(in.FhOut); !st.Ok() {
		return 0, st
	}
	defer t.dirty(in.FhOut, dst)()
	c.FhIn, c.FhOut = src.inner, dst.inner
	return t.inner.CopyFileRange(cancel, &c)
}

func (t *FS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return st
	}
	c.Fh = h.inner
	return t.inner.Ioctl(cancel, &c, inbuf, out, outbuf)
}

func (t *FS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return st
	}
	c.Fh = h.inner
	mark := t.flushing(h)
	if st = t.inner.Flush(cancel, &c); st.Ok() {
		t.flushed(in.Fh, h, mark)
	}
	return st
}

func (t *FS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer t.op()()
	c, h, st := t.fsync(in)
	if !st.Ok() {
		return st
	}
	mark := t.flushing(h)
	if st = t.inner.Fsync(cancel, &c); st.Ok() && in.Fh != 0 {
		t.flushed(in.Fh, h, mark)
	}
	return st
}

func (t *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer t.op()()
	c, _, st := t.fsync(in)
	if !st.Ok() {
		return st
	}
	return t.inner.FsyncDir(cancel, &c)
}

func (t *FS) fsync(in *fuse.FsyncIn) (fuse.FsyncIn, *handle, fuse.Status) {
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); st.Ok() {
		c.Fh = h.inner
	}
	return c, h, st
}

func (t *FS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return st
	}
	defer t.dirty(in.Fh, h)()
	c.Fh = h.inner
	return t.inner.Fallocate(cancel, &c)
}

func (t *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return st
	}
	c.Fh = h.inner
	return t.inner.ReadDir(cancel, &c, out)
}

func (t *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.op()()
	c := *in
	var h *handle
	var st fuse.Status
	if c.InHeader, h, st = t.nodeAndHandle(in.InHeader, in.Fh); !st.Ok() {
		return st
	}
	c.Fh = h.inner
	if st = t.inner.ReadDirPlus(cancel, &c, out); st.Ok() {
		t.enteredAll(in.NodeId, out.Bytes())
	}
	return st
}

func (t *FS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer t.op()()
	in, st := t.header(*h)
	if !st.Ok() {
		return st
	}
	return t.inner.StatFs(cancel, &in, out)
}

func (t *FS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer t.op()()
	c := *in
	var st fuse.Status
	if c.InHeader, st = t.header(in.InHeader); !st.Ok() {
		return st
	}
	if in.Fh != 0 {
		h, st := t.innerHandle(in.Fh)
		if !st.Ok() {
			return st
		}
		c.Fh = h.inner
	}
	return t.inner.Statx(cancel, &c, out)
}
