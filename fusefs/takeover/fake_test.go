package takeover

import (
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// tree is the files a fake serves: the bucket, which outlives the
// process serving it, so a predecessor's fake and a successor's share it.
type tree struct {
	mu      sync.Mutex
	names   map[childKey]uint64 // (directory ino, name) → ino
	modes   map[uint64]uint32
	nextIno uint64
}

func newTree() *tree {
	return &tree{names: map[childKey]uint64{}, modes: map[uint64]uint32{1: syscall.S_IFDIR}, nextIno: 100}
}

// add makes dir/name of mode (dir 1 is the root) and returns its ino.
func (tr *tree) add(dir uint64, name string, mode uint32) uint64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.addLocked(dir, name, mode)
}

func (tr *tree) addLocked(dir uint64, name string, mode uint32) uint64 {
	ino := tr.nextIno
	tr.nextIno++
	tr.names[childKey{dir, name}] = ino
	tr.modes[ino] = mode
	return ino
}

// fake is the inner filesystem: go-fuse's node bridge, reduced to what
// FS must get right. It numbers nodes from 1000 and takes a forgotten
// number back into use first, as a real one may, and checks that every
// number it is sent is one it gave out and holds.
type fake struct {
	fuse.RawFileSystem // ENOSYS for the rest
	tree               *tree

	mu      sync.Mutex
	inoOf   map[uint64]uint64 // inner node id → ino
	idOf    map[uint64]uint64 // ino → inner node id
	count   map[uint64]uint64 // inner node id → lookups held
	free    []uint64
	next    uint64
	fhs     map[uint64]uint64 // handle → ino
	nextFh  uint64
	errs    []string // what FS sent that it should not have
	lookups []string
	forgets [][2]uint64
	opens   []uint32 // flags
	release int
	// dirplus are the entries of the last READDIRPLUS reply, as written.
	dirplus map[string]*fuse.EntryOut
	// beforeLookup, if set, runs as each Lookup begins (without the
	// lock): a test makes races there.
	beforeLookup func(name string)
}

func newFake(tr *tree) *fake {
	return &fake{RawFileSystem: fuse.NewDefaultRawFileSystem(), tree: tr,
		inoOf: map[uint64]uint64{1: 1}, idOf: map[uint64]uint64{1: 1}, count: map[uint64]uint64{1: 1},
		next: 1000, fhs: map[uint64]uint64{}, nextFh: 500}
}

func (f *fake) fail(format string, args ...any) fuse.Status {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	return fuse.EIO
}

// node is the ino of inner node id. Called with f.mu held.
func (f *fake) node(id uint64) (uint64, bool) {
	ino, ok := f.inoOf[id]
	if !ok {
		f.fail("node %d: not a node this filesystem holds", id)
	}
	return ino, ok
}

// entry gives out a lookup of ino. Called with f.mu held.
func (f *fake) entry(ino uint64, out *fuse.EntryOut) {
	id, ok := f.idOf[ino]
	if !ok {
		if n := len(f.free); n > 0 {
			id, f.free = f.free[n-1], f.free[:n-1]
		} else {
			id = f.next
			f.next++
		}
		f.idOf[ino], f.inoOf[id] = id, ino
	}
	f.count[id]++
	f.tree.mu.Lock()
	*out = fuse.EntryOut{NodeId: id, Attr: fuse.Attr{Ino: ino, Mode: f.tree.modes[ino] | 0o644}}
	f.tree.mu.Unlock()
}

func (f *fake) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if f.beforeLookup != nil {
		f.beforeLookup(name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, ok := f.node(h.NodeId)
	if !ok {
		return fuse.EIO
	}
	f.lookups = append(f.lookups, name)
	f.tree.mu.Lock()
	ino, ok := f.tree.names[childKey{dir, name}]
	f.tree.mu.Unlock()
	if !ok {
		return fuse.ENOENT
	}
	f.entry(ino, out)
	return fuse.OK
}

func (f *fake) Forget(id, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgets = append(f.forgets, [2]uint64{id, n})
	if f.count[id] < n {
		f.fail("forget %d of node %d, which holds %d", n, id, f.count[id])
		return
	}
	if f.count[id] -= n; f.count[id] == 0 {
		delete(f.idOf, f.inoOf[id])
		delete(f.inoOf, id)
		delete(f.count, id)
		f.free = append(f.free, id)
	}
}

func (f *fake) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, ok := f.node(in.NodeId)
	if !ok {
		return fuse.EIO
	}
	out.Ino = ino
	return fuse.OK
}

func (f *fake) make(dir uint64, name string, mode uint32, out *fuse.EntryOut) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.node(dir)
	if !ok {
		return fuse.EIO
	}
	f.tree.mu.Lock()
	if _, ok := f.tree.names[childKey{d, name}]; ok {
		f.tree.mu.Unlock()
		return fuse.Status(syscall.EEXIST)
	}
	ino := f.tree.addLocked(d, name, mode)
	f.tree.mu.Unlock()
	f.entry(ino, out)
	return fuse.OK
}

func (f *fake) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return f.make(in.NodeId, name, syscall.S_IFDIR, out)
}

func (f *fake) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if st := f.make(in.NodeId, name, syscall.S_IFREG, &out.EntryOut); !st.Ok() {
		return st
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Fh = f.handle(f.inoOf[out.NodeId])
	return fuse.OK
}

// handle gives out a file handle on ino. Called with f.mu held.
func (f *fake) handle(ino uint64) uint64 {
	fh := f.nextFh
	f.nextFh++
	f.fhs[fh] = ino
	return fh
}

func (f *fake) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, ok := f.node(in.NodeId)
	if !ok {
		return fuse.EIO
	}
	f.opens = append(f.opens, in.Flags)
	out.Fh = f.handle(ino)
	return fuse.OK
}

func (f *fake) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return f.Open(cancel, in, out)
}

// file checks that FS sent inner handle fh on inner node id (0: any).
func (f *fake) file(id, fh uint64) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, ok := f.fhs[fh]
	if !ok {
		return f.fail("handle %d: not one this filesystem gave out", fh)
	}
	if id != 0 && f.inoOf[id] != ino {
		return f.fail("handle %d is on ino %d, not node %d", fh, ino, id)
	}
	return fuse.OK
}

func (f *fake) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	return fuse.ReadResultData(nil), f.file(in.NodeId, in.Fh)
}

func (f *fake) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return uint32(len(data)), f.file(in.NodeId, in.Fh)
}

func (f *fake) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return f.file(in.NodeId, in.Fh)
}

func (f *fake) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return f.file(in.NodeId, in.Fh)
}

func (f *fake) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	if f.file(in.NodeId, in.Fh).Ok() {
		f.mu.Lock()
		delete(f.fhs, in.Fh)
		f.release++
		f.mu.Unlock()
	}
}

func (f *fake) ReleaseDir(in *fuse.ReleaseIn) { f.Release(nil, in) }

func (f *fake) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, ok := f.node(h.NodeId)
	if !ok {
		return fuse.EIO
	}
	f.tree.mu.Lock()
	defer f.tree.mu.Unlock()
	if _, ok := f.tree.names[childKey{dir, name}]; !ok {
		return fuse.ENOENT
	}
	delete(f.tree.names, childKey{dir, name})
	return fuse.OK
}

func (f *fake) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	from, ok1 := f.node(in.NodeId)
	to, ok2 := f.node(in.Newdir)
	if !ok1 || !ok2 {
		return fuse.EIO
	}
	f.tree.mu.Lock()
	defer f.tree.mu.Unlock()
	src, dst := childKey{from, oldName}, childKey{to, newName}
	a, ok := f.tree.names[src]
	if !ok {
		return fuse.ENOENT
	}
	b, exists := f.tree.names[dst]
	switch {
	case in.Flags&renameExchange != 0 && !exists:
		return fuse.ENOENT
	case in.Flags&renameExchange != 0:
		f.tree.names[src] = b
	default:
		delete(f.tree.names, src)
	}
	f.tree.names[dst] = a
	return fuse.OK
}

// ReadDirPlus lists the whole directory, "." and ".." first with no
// entry, as go-fuse's bridge does.
func (f *fake) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := f.file(in.NodeId, in.Fh); !st.Ok() {
		return st
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	dir := f.inoOf[in.NodeId]
	f.dirplus = map[string]*fuse.EntryOut{}
	for _, dot := range []string{".", ".."} {
		f.dirplus[dot] = out.AddDirLookupEntry(fuse.DirEntry{Name: dot, Mode: syscall.S_IFDIR, Ino: dir})
	}
	f.tree.mu.Lock()
	var names []string
	for k := range f.tree.names {
		if k.parent == dir {
			names = append(names, k.name)
		}
	}
	f.tree.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		f.tree.mu.Lock()
		ino := f.tree.names[childKey{dir, name}]
		mode := f.tree.modes[ino]
		f.tree.mu.Unlock()
		e := out.AddDirLookupEntry(fuse.DirEntry{Name: name, Mode: mode, Ino: ino})
		if e == nil {
			break
		}
		f.entry(ino, e)
		f.dirplus[name] = e
	}
	return fuse.OK
}

// held is the lookups the fake holds, less the root's.
func (f *fake) held() map[uint64]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[uint64]uint64{}
	for id, n := range f.count {
		if id != 1 {
			m[id] = n
		}
	}
	return m
}
