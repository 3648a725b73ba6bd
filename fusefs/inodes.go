package fusefs

import (
	"container/list"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
)

// The kernel holds on to every inode it looked up until it needs the
// memory (it charges its dentries to the process that walked the tree,
// not to the mounter), and the mounter must keep each one it holds: one
// `find` over a large bucket would grow the mounter's inode table past
// any memory limit. inodeTable keeps it within Options.MaxInodes: past
// it, the inodes looked up longest ago that nothing uses (no open file,
// nothing written and not uploaded) are handed back to the kernel to
// forget, and go-fuse drops them when it does. A later lookup makes a
// new one from the store, as for any name not seen yet.

// trimTo is the share of MaxInodes a trim brings the table down to, so
// that trims come in batches rather than one inode at a time.
const trimTo = 0.9

// inodeTable orders the inodes of files, links and directories (not the
// root) by their last lookup.
type inodeTable struct {
	max int

	mu    sync.Mutex
	lru   list.List // of *fs.Inode, the latest lookup at the front
	elems map[*fs.Inode]*list.Element
	// trimming is set while a trim runs: one at a time.
	trimming bool
	// prune is how inodes are handed back (NotifyPrune; tests replace it).
	prune func(root *fs.Inode, nodes []*fs.Inode) syscall.Errno
}

func newInodeTable(max int) *inodeTable {
	return &inodeTable{max: max, elems: map[*fs.Inode]*list.Element{}, prune: pruneOrInvalidate}
}

// add counts a new inode; past the bound, a trim starts in the
// background (never in the request that made the inode: the kernel may
// hold the directory's lock for it, which handing back entries needs).
func (t *inodeTable) add(root, in *fs.Inode, busy func(*fs.Inode) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.elems[in]; ok {
		t.lru.MoveToFront(e)
		return
	}
	t.elems[in] = t.lru.PushFront(in)
	if t.lru.Len() > t.max && !t.trimming {
		t.trimming = true
		go t.trim(root, busy)
	}
}

// touch notes a lookup of an inode the table holds.
func (t *inodeTable) touch(in *fs.Inode) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.elems[in]; ok {
		t.lru.MoveToFront(e)
	}
}

// forget drops an inode go-fuse forgot.
func (t *inodeTable) forget(in *fs.Inode) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.elems[in]; ok {
		t.lru.Remove(e)
		delete(t.elems, in)
	}
}

// len is the number of inodes held.
func (t *inodeTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// trim hands the oldest unused inodes beyond trimTo × max back to the
// kernel. Those in use go to the front: they are not asked for again
// until the rest of the table has been.
func (t *inodeTable) trim(root *fs.Inode, busy func(*fs.Inode) bool) {
	t.mu.Lock()
	excess := t.lru.Len() - int(float64(t.max)*trimTo)
	var victims []*fs.Inode
	for e := t.lru.Back(); e != nil && excess > 0; {
		prev := e.Prev()
		in := e.Value.(*fs.Inode)
		if busy(in) {
			t.lru.MoveToFront(e)
		} else {
			victims = append(victims, in)
			excess--
		}
		e = prev
	}
	t.mu.Unlock()
	// Outside the lock: the kernel answers with FORGETs, whose
	// OnForget takes it.
	if len(victims) > 0 {
		t.prune(root, victims)
	}
	t.mu.Lock()
	t.trimming = false
	t.mu.Unlock()
}

// pruneOrInvalidate asks the kernel to forget nodes (FUSE_NOTIFY_PRUNE,
// Linux 6.16), or, on a kernel without it, to drop each one's entry in
// its directory, after which it forgets the inode once nothing uses it.
func pruneOrInvalidate(root *fs.Inode, nodes []*fs.Inode) syscall.Errno {
	if errno := root.NotifyPrune(nodes); errno != syscall.ENOSYS && errno != syscall.EINVAL {
		return errno
	}
	for _, in := range nodes {
		if name, parent := in.Parent(); parent != nil {
			parent.NotifyEntry(name)
		}
	}
	return 0
}

// inUse says whether an inode holds what must not be forgotten: a file
// open, or with content here that is not (yet) its object's.
func inUse(in *fs.Inode) bool {
	f, ok := in.Operations().(*fileNode)
	if !ok {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens > 0 || f.local() || f.upload.pending()
}

// OnForget: go-fuse dropped the inode (the kernel forgot it).
func (n *fileNode) OnForget()    { n.fsys.forgotten(&n.Inode) }
func (n *dirNode) OnForget()     { n.fsys.forgotten(&n.Inode) }
func (n *symlinkNode) OnForget() { n.fsys.forgotten(&n.Inode) }

func (f *FS) forgotten(in *fs.Inode) { f.inodes.forget(in) }

// Inodes is the number of inodes the mount holds for files, links and
// directories (not the root).
func (f *FS) Inodes() int { return f.inodes.len() }
