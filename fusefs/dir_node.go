package fusefs

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/store"
)

// dirNode is a directory: a key prefix "a/b/", with or without a marker
// object of that name.
type dirNode struct {
	fs.Inode
	fsys *FS

	mu        sync.Mutex
	attr      attrs
	hasMarker bool
	// markerSeq counts the times hasMarker was set: a HEAD that found no
	// marker clears it only if none was made meanwhile (directoryAgain).
	markerSeq uint64
	listCache *listing
	// relistable says the last complete listing held at most relistLimit
	// names: a lookup that misses after it expired may list again.
	relistable bool
	// shadowed are names a listing showed as a directory after it had
	// handed out a file of the same name: lookups of these ask for both,
	// so that the directory wins.
	shadowed map[string]bool
	// relisting is closed when the listing relist runs, relisted, ends.
	relisting chan struct{}
	relisted  *listing
	// missStreak counts the lookups in a row that asked the store by name
	// and found nothing (see expectNewName).
	missStreak int
	// byName counts the lookups that asked the store by name and found
	// the name since byNameSince, within clusterWindow (see clustering).
	byName      int
	byNameSince time.Time
	// unclusterable: a listing started by clustered lookups found more
	// than the FS's clusterLimit names; lookups here ask by name.
	unclusterable bool
	// clusterAgain is when lookups may cluster again after a clustered
	// listing failed (clusterBackoff).
	clusterAgain time.Time
	// reads counts lookups by name and the opens that followed them
	// (see peeks).
	reads lookupReads
	// shownAt is when the store last showed a key below the directory,
	// in Unix nanoseconds (see noteShown).
	shownAt atomic.Int64
}

// newNameStreak is how many lookups by name in a row must find nothing
// before the next is taken for a new name too.
const newNameStreak = 3

var (
	_ fs.NodeLookuper       = (*dirNode)(nil)
	_ fs.NodeOpendirHandler = (*dirNode)(nil)
	_ fs.NodeGetattrer      = (*dirNode)(nil)
	_ fs.NodeSetattrer      = (*dirNode)(nil)
	_ fs.NodeMkdirer        = (*dirNode)(nil)
	_ fs.NodeRmdirer        = (*dirNode)(nil)
	_ fs.NodeCreater        = (*dirNode)(nil)
	_ fs.NodeUnlinker       = (*dirNode)(nil)
	_ fs.NodeRenamer        = (*dirNode)(nil)
	_ fs.NodeSymlinker      = (*dirNode)(nil)
	_ fs.NodeStatfser       = (*dirNode)(nil)
	_ fs.NodeLinker         = (*dirNode)(nil)
	_ fs.NodeMknoder        = (*dirNode)(nil)
)

// key is the directory's prefix: "" for the root of a whole bucket,
// otherwise ending in "/".
func (n *dirNode) key() string {
	k := n.fsys.keyOf(&n.Inode)
	if k != "" && k[len(k)-1] != '/' {
		k += "/"
	}
	return k
}

func (n *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	n.fsys.fill(n.attr, &out.Attr)
	n.mu.Unlock()
	return 0
}

func (n *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	n.mu.Lock()
	a := n.attr
	n.mu.Unlock()
	// A bucket's root has no object to hold its attributes, so changes to
	// it last only as long as the mount; nor has a removed directory
	// still open.
	_, linked := n.fsys.pathOf(&n.Inode)
	if n.fsys.applySetattr(&a, in) && linked && !(n.IsRoot() && n.fsys.opts.Prefix == "") {
		if err := n.putMarker(ctx, a); err != nil {
			return errno(err)
		}
	}
	n.mu.Lock()
	n.attr = a
	n.fsys.fill(n.attr, &out.Attr)
	n.mu.Unlock()
	return 0
}

// enter enters the gate (keyGate) for the key of name in n (the
// directory's own with name "") as it stands once inside.
func (n *dirNode) enter(name string) (key string, leave func()) {
	key, leave, _ = n.fsys.gate.enterAt(func() (string, error) { return n.key() + name, nil })
	return key, leave
}

// putMarker writes the directory's marker object with attributes a,
// keeping the metadata of the marker there that is not attributes.
func (n *dirNode) putMarker(ctx context.Context, a attrs) error {
	key, leave := n.enter("")
	meta, err := n.keptMetadata(ctx, key, a.metadata())
	var o store.Object
	if err == nil {
		o, err = n.fsys.store.Put(ctx, key, bytes.NewReader(nil), 0, meta)
	}
	leave()
	if err != nil {
		return err
	}
	o.Key, o.Metadata = key, meta
	noteInParent(&n.Inode, dirEntry{isDir: true, obj: o})
	n.mu.Lock()
	n.hasMarker = true
	n.markerSeq++
	n.mu.Unlock()
	return nil
}

// keptMetadata is meta and the metadata of the marker at key that is
// not attributes: another tool's, and on a prefix volume's root the
// driver's record of the volume (its size, which an expansion changes
// and every mounter reads), which a chmod of the root must not lose.
func (n *dirNode) keptMetadata(ctx context.Context, key string, meta map[string]string) (map[string]string, error) {
	n.mu.Lock()
	has := n.hasMarker
	n.mu.Unlock()
	if !has {
		return meta, nil
	}
	old, err := n.fsys.store.Head(ctx, key)
	if errors.Is(err, store.ErrNotExist) {
		return meta, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(meta)+len(old.Metadata))
	for k, v := range old.Metadata {
		out[k] = v
	}
	for k, v := range meta {
		out[k] = v
	}
	return out, nil
}

// keepAlive gives an implicit directory (one that exists only because keys
// lie below it) a marker before its last child goes, so that removing a
// file never removes the directory it was in.
func (n *dirNode) keepAlive(ctx context.Context) error {
	n.mu.Lock()
	has, a := n.hasMarker, n.attr
	n.mu.Unlock()
	if has {
		return nil
	}
	return n.putMarker(ctx, a)
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !validName(name) {
		return nil, syscall.ENOENT
	}
	if ch := n.localChild(name); ch != nil {
		return ch, fillEntry(ctx, ch, out) // created here, not uploaded yet
	}
	e, found, known := n.cached(name)
	// A superseded child's open failed with ESTALE (or will): the
	// store's answer, not a listing's, says which version the new inode
	// is for.
	superseded := n.supersededChild(name)
	if superseded != nil {
		known = false
	}
	if !known { // S3 is asked
		var cancel context.CancelFunc
		ctx, cancel = n.fsys.patient(ctx)
		defer cancel()
		if superseded == nil { // nor one relist may give
			if found {
				e, known = n.listedEntry(ctx, e)
			}
			if !known {
				if l := n.relist(ctx, name); l != nil {
					e, found, known = n.answerFrom(l, name)
				}
			}
		}
		if ctx.Err() != nil {
			return nil, syscall.EINTR // S3 did not answer in the grace
		}
	}
	if known && !found {
		return nil, syscall.ENOENT
	}
	if !known {
		if ch := n.directoryAgain(ctx, name, out); ch != nil {
			return ch, fillEntry(ctx, ch, out)
		}
		var how ask
		switch {
		case n.knownDirectory(name):
			how = directoryWins
		case n.expectNewName():
			how = fileFirstAtOnce
		default:
			how = fileFirstPeek(n.peeks())
		}
		r, err := n.fsys.resolve(ctx, n.key()+name, how)
		n.noteLookupByName(err)
		if err != nil {
			return nil, errno(err)
		}
		e = dirEntry{name: name, isDir: r.isDir, obj: r.obj}
		if superseded != nil {
			superseded.currentAgain(e)
			// The listing, should it still name the version before, would
			// otherwise supersede the new inode at the next lookup.
			n.noteChild(name, &e)
		}
		ch := n.childFor(ctx, e)
		if f, ok := ch.Operations().(*fileNode); ok {
			n.noteFound(f)
		}
		return ch, fillEntry(ctx, ch, out)
	}
	ch := n.childFor(ctx, e)
	return ch, fillEntry(ctx, ch, out)
}

// supersededChild is the child file at name if it is superseded (see
// fileNode.superseded), else nil.
func (n *dirNode) supersededChild(name string) *fileNode {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	f, ok := ch.Operations().(*fileNode)
	if !ok {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.supersededLocked() {
		return nil
	}
	return f
}

// expectNewName reports whether the last lookups by name in this
// directory all found nothing: files are being created in a directory too
// large to relist (or never listed), one lookup each. A HEAD that would
// find nothing and then a LIST for a directory are two round trips per
// create; asked at once (fileFirstAtOnce, same answer), one. Should the
// name exist after all, it costs one LIST more than a HEAD alone and ends
// the streak.
func (n *dirNode) expectNewName() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.missStreak >= newNameStreak
}

// noteLookupByName keeps the streak of lookups by name that found
// nothing, and counts the lookups by name of the current clusterWindow.
func (n *dirNode) noteLookupByName(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if now := time.Now(); now.Sub(n.byNameSince) > clusterWindow {
		n.byName, n.byNameSince = 0, now
	}
	if err == nil {
		// Only names found: creating files makes lookups that miss,
		// which the new-name streak serves, without a listing.
		n.byName++
		n.noteShown()
	}
	switch {
	case errors.Is(err, store.ErrNotExist):
		n.missStreak++
	case err == nil:
		n.missStreak = 0
	}
}

// knownDirectory reports a name this mount has seen as a directory: its
// lookup asks for both a file and a directory, so that it stays one.
func (n *dirNode) knownDirectory(name string) bool {
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Mode == syscall.S_IFDIR {
		return true
	}
	return n.isShadowed(name)
}

// localChild is a child inode this mount created that the store does not
// have yet (a file still being written).
func (n *dirNode) localChild(name string) *fs.Inode {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	if f, ok := ch.Operations().(*fileNode); ok && f.isLocal() {
		return ch
	}
	return nil
}

// childFor returns the inode for e, reusing the existing one when it is of
// the same kind so that open files keep their state.
func (n *dirNode) childFor(ctx context.Context, e dirEntry) *fs.Inode {
	kind := typeOf(e)
	var a attrs
	if e.isDir {
		a = n.fsys.attrsOf(e.obj, syscall.S_IFDIR)
	} else {
		a = n.fsys.attrsOf(e.obj, syscall.S_IFREG)
		kind = a.mode & syscall.S_IFMT
	}
	if ch := n.GetChild(e.name); ch != nil && ch.StableAttr().Mode == kind {
		n.fsys.inodes.touch(ch)
		switch node := ch.Operations().(type) {
		case *fileNode:
			if !node.refresh(a) {
				return n.newChild(ctx, kind, a, false) // superseded
			}
		case *dirNode:
			if e.obj.Key != "" {
				node.mu.Lock()
				node.attr, node.hasMarker = a, true
				node.markerSeq++
				node.mu.Unlock()
			}
		case *symlinkNode:
			node.refresh(a)
		}
		return ch
	}
	return n.newChild(ctx, kind, a, e.isDir && e.obj.Key != "")
}

func (n *dirNode) newChild(ctx context.Context, kind uint32, a attrs, hasMarker bool) *fs.Inode {
	var node fs.InodeEmbedder
	switch kind {
	case syscall.S_IFDIR:
		node = &dirNode{fsys: n.fsys, attr: a, hasMarker: hasMarker}
	case syscall.S_IFLNK:
		node = &symlinkNode{fsys: n.fsys, attr: a, attrAt: time.Now()}
	default:
		// From the store, so stored: an open of it is not a local file.
		node = &fileNode{fsys: n.fsys, attr: a, attrAt: time.Now(), stored: true, inheritedPages: n.fsys.inherited}
	}
	return n.adopt(ctx, node, kind)
}

// adopt makes the inode for node, a child of n's, and counts it in the
// inode table.
func (n *dirNode) adopt(ctx context.Context, node fs.InodeEmbedder, mode uint32) *fs.Inode {
	ch := n.NewInode(ctx, node, fs.StableAttr{Mode: mode})
	n.fsys.inodes.add(&n.fsys.root.Inode, ch, inUse)
	return ch
}

func fillEntry(ctx context.Context, ch *fs.Inode, out *fuse.EntryOut) syscall.Errno {
	if f, ok := ch.Operations().(*fileNode); ok {
		// The lookup's own answer is as fresh as attributes get; a
		// Getattr past a StatTTL shorter than the lookup took would ask
		// for the key of an inode not in the tree yet, which has none.
		f.fillAttr(&out.Attr)
		return 0
	}
	var ao fuse.AttrOut
	if errno := ch.Operations().(fs.NodeGetattrer).Getattr(ctx, nil, &ao); errno != 0 {
		return errno
	}
	out.Attr = ao.Attr
	return 0
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	if !validName(name) {
		return nil, syscall.EINVAL
	}
	a := n.newAttrs(ctx, syscall.S_IFDIR|mode&07777)
	key, leave := n.enter(name + "/")
	_, err := n.fsys.store.Put(ctx, key, bytes.NewReader(nil), 0, a.metadata())
	leave()
	if err != nil {
		return nil, errno(err)
	}
	n.noteChild(name, &dirEntry{name: name, isDir: true, obj: store.Object{Key: key, Metadata: a.metadata()}})
	ch := n.newChild(ctx, syscall.S_IFDIR, a, true)
	// A directory made a moment ago is empty (unless another client wrote
	// into it since, which the TTL allows for): lookups of names about to
	// be created need not ask the store.
	ch.Operations().(*dirNode).remember(nil)
	n.fsys.fill(a, &out.Attr)
	return ch, 0
}

// newAttrs are the attributes of a node the caller creates now: the
// caller's owner, except that in a set-group-ID directory the node takes
// the directory's group, and a directory made there is set-group-ID too
// (POSIX, as local filesystems do; the kernel leaves it to a FUSE server).
func (n *dirNode) newAttrs(ctx context.Context, mode uint32) attrs {
	a := attrs{mode: mode, uid: n.fsys.opts.UID, gid: n.fsys.opts.GID, mtime: time.Now()}
	// FromContext, not a type assertion: ctx may be wrapped (uninterruptible).
	if c, ok := fuse.FromContext(ctx); ok {
		a.uid, a.gid = c.Uid, c.Gid
	}
	n.mu.Lock()
	parent := n.attr
	n.mu.Unlock()
	if n.fsys.groupFixed {
		a.gid = n.fsys.opts.GID
	}
	if parent.mode&syscall.S_ISGID != 0 {
		a.gid = parent.gid
		if mode&syscall.S_IFMT == syscall.S_IFDIR {
			a.mode |= syscall.S_ISGID
		}
	}
	return a
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	key := n.key() + name + "/"
	for e, err := range n.fsys.store.List(ctx, key, "", false) {
		if err != nil {
			return errno(err)
		}
		if e.IsPrefix() || e.Key != key {
			return syscall.ENOTEMPTY
		}
	}
	if ch := n.GetChild(name); ch != nil {
		for _, gc := range ch.Children() {
			if f, ok := gc.Operations().(*fileNode); ok && f.isLocal() {
				return syscall.ENOTEMPTY
			}
		}
	}
	if err := n.keepAlive(ctx); err != nil {
		return errno(err)
	}
	key, leave := n.enter(name + "/")
	err := n.fsys.store.Delete(ctx, key)
	leave()
	if err != nil {
		return errno(err)
	}
	if ch := n.GetChild(name); ch != nil {
		n.fsys.unplace(ch)
	}
	n.noteChild(name, nil)
	return 0
}

func (n *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.fsys.opts.ReadOnly {
		return nil, nil, 0, syscall.EROFS
	}
	if !validName(name) {
		return nil, nil, 0, syscall.EINVAL
	}
	a := n.newAttrs(ctx, syscall.S_IFREG|mode&07777)
	node := &fileNode{fsys: n.fsys, attr: a, attrAt: time.Now()}
	node.startCreated()
	ch := n.adopt(ctx, node, syscall.S_IFREG)
	fh, fuseFlags := node.openHandle(flags)
	n.fsys.fill(a, &out.Attr)
	return ch, fh, fuseFlags, 0
}

func (n *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	if !validName(name) {
		return nil, syscall.EINVAL
	}
	a := n.newAttrs(ctx, syscall.S_IFLNK|0o777)
	a.size = int64(len(target))
	key, leave := n.enter(name)
	o, err := n.fsys.store.Put(ctx, key, bytes.NewReader([]byte(target)), int64(len(target)), a.metadata())
	leave()
	if err != nil {
		return nil, errno(err)
	}
	a.etag = o.ETag
	o.Metadata = a.metadata()
	n.noteChild(name, &dirEntry{name: name, obj: o})
	node := &symlinkNode{fsys: n.fsys, attr: a, attrAt: time.Now(), target: target, haveTarget: true}
	ch := n.adopt(ctx, node, syscall.S_IFLNK)
	n.fsys.fill(a, &out.Attr)
	return ch, 0
}

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	if err := n.keepAlive(ctx); err != nil {
		return errno(err)
	}
	var f *fileNode
	if ch := n.GetChild(name); ch != nil {
		if f, _ = ch.Operations().(*fileNode); f != nil {
			f.keepForUnlink(ctx)
		}
	}
	size := n.removedSize(f, name)
	key, leave := n.enter(name)
	err := n.fsys.store.Delete(ctx, key)
	leave()
	if err != nil {
		if f != nil {
			f.journalAgain(ctx)
		}
		return errno(err)
	}
	n.fsys.countRemoved(size)
	if f != nil {
		f.markUnlinked()
		n.fsys.unplace(&f.Inode)
	}
	n.noteChild(name, nil)
	return 0
}

// Link: S3 has no hard links, and faking one by copying would make two
// files that silently diverge.
func (n *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

// Mknod: device nodes, FIFOs and sockets cannot be stored as objects.
func (n *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

// Statfs reports the volume's capacity and usage under a quota, else an
// effectively unlimited filesystem: S3 has no capacity.
func (n *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	const bsize = 4096
	blocks, free := uint64(1<<40), uint64(1<<40) // 4 PiB
	if capacity, used := n.fsys.Usage(); capacity > 0 {
		blocks = uint64(capacity) / bsize
		free = uint64(max(0, capacity-used)) / bsize
	}
	out.Bsize = bsize
	out.Frsize = bsize
	out.Blocks = blocks
	out.Bfree = free
	out.Bavail = free
	out.Files = 1 << 40
	out.Ffree = 1 << 40
	out.NameLen = maxNameLen
	return 0
}
