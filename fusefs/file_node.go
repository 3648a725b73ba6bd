package fusefs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/store"
)

// fileNode is a regular file: one object. While it is being written its
// content lives locally, in exactly one of two forms: a stream (written
// sequentially from 0 and uploaded as it grows) or a staging file (a whole
// local copy, for random writes); the object is replaced on flush/fsync.
type fileNode struct {
	fs.Inode
	fsys *FS

	mu     sync.Mutex
	attr   attrs
	attrAt time.Time
	// stored says the object exists in the store (false for a file created
	// here whose first upload has not happened).
	stored   bool
	mtimeSet bool // mtime was set explicitly since the last upload
	// foundAt is when a lookup by name found the file, until it is
	// opened (see dirNode.peeks).
	foundAt time.Time

	opens, writers int
	unlinked       bool
	// cachedETag is the ETag whose content the kernel's page cache holds,
	// pagesLocal when it holds the local content (pagesCurrentLocked).
	cachedETag string
	// kernelSize is the size the kernel was last told or made itself (by
	// writing): it pads a READ answered short of it with zeros up to it
	// when attributes changed while the READ ran.
	kernelSize int64
	// dropping: the kernel is being told to drop its pages of the file.
	dropping bool
	// inheritedPages: the kernel may have pages of the file that a
	// predecessor's connection left (FS.inherited), until the first open.
	inheritedPages bool
	// own are the versions this mount made of the file.
	own ownVersions
	// replacedElsewhere counts the times a lookup or stat found the
	// object replaced by a version this mount did not write: a handle
	// opened before keeps reading its own version (handle.pin).
	replacedElsewhere uint64
	// superseded: under the kernel's writeback cache (Options.
	// WritebackCache), a lookup, stat or read found the object replaced
	// by a version this mount did not write. The kernel keeps its own
	// size of a cached inode there, so the inode stays with its version:
	// the name's next lookup makes a new inode for the store's, and an
	// open of this one fails with ESTALE, which has the kernel look the
	// name up again and open that.
	superseded bool
	// diverged: under the writeback cache, a WRITE of pages the kernel
	// held failed, so its size and pages of the inode hold bytes of no
	// version. Like a superseded node, but for good: the store may still
	// hold the node's version, and the inode must not be handed out again.
	diverged bool
	// shown is the version whose attributes the kernel was last told
	// (see shownLocked); handles are the open ones.
	shown   attrs
	handles map[*handle]struct{}

	stream  *stream
	staging *stagingFile
	// frozen is journaled content a change has since moved away from
	// (keepJournaledLocked): kept, with its record, until newer content
	// is journaled or uploaded, so that a crash meanwhile restores what
	// close acknowledged rather than a change half made.
	frozen *stagingFile
	// base is the version the staging copy was loaded from: its upload
	// is conditional on the object still being that version, so that a
	// change made here never silently overwrites another writer's.
	// AnyVersion when the content replaces the object whole (created,
	// truncated to empty), which is last-writer-wins, as S3 itself.
	base string
	// upload is where the content stands with its upload, and which
	// failure the file's writers have still to hear of.
	upload uploadState
	// charge is the file's part of the quota's count while it is written.
	charge quotaCharge
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
)

func (n *fileNode) key() string { return n.fsys.keyOf(&n.Inode) }

// errNoName: a file unlinked (or replaced by a rename) while open has no
// key: what its handles write stays local, and what was not kept locally
// when it lost its name cannot be read (ESTALE).
var errNoName = errors.New("the file has no name in the bucket any more")

// linkedKey is the file's key, as long as it has a name.
func (n *fileNode) linkedKey() (string, error) {
	p, linked := n.fsys.pathOf(&n.Inode)
	if !linked {
		return "", errNoName
	}
	return n.fsys.opts.Prefix + p, nil
}

// local reports whether local content is authoritative.
func (n *fileNode) local() bool { return n.stream != nil || n.staging != nil }

func (n *fileNode) size() int64 {
	switch {
	case n.stream != nil:
		return n.stream.size
	default:
		return n.attr.size
	}
}

// isLocal reports a file that exists only in this mount so far. A file
// whose lock is held is in use here (an upload, a write under way) and
// counts as local: waiting for it would hold a listing or lookup in its
// directory for as long as an upload takes, and one retrying an endpoint
// that does not answer takes minutes.
func (n *fileNode) isLocal() bool {
	if !n.mu.TryLock() {
		return true
	}
	defer n.mu.Unlock()
	return !n.stored && !n.unlinked && (n.local() || n.opens > 0)
}

// refresh takes attributes from a lookup unless local content rules.
// It reports whether the node stays the name's: not when it is
// superseded. (A writer still open on it loads the version it has when
// it writes, which fails: nothing is stored over the other version.)
func (n *fileNode) refresh(a attrs) (stays bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.local() || n.unlinked {
		return true
	}
	n.takeAttrsLocked(a)
	if n.diverged {
		return false
	}
	// A listing older than what superseded the node still names its
	// version: the node stays until the store is asked (Lookup).
	return !n.superseded || a.etag == n.attr.etag
}

// currentAgain ends the supersession of n when the store,
// just asked, holds n's version after all (one of the same bytes,
// written again): its open would fail with ESTALE for good otherwise.
func (n *fileNode) currentAgain(e dirEntry) {
	if e.isDir {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.obj.ETag == n.attr.etag {
		n.superseded = false
	}
}

// takeAttrsLocked takes attributes the store gave, counting a version
// this mount did not write (see handle.pin); under the writeback cache
// such a version supersedes the node instead, which keeps its own.
func (n *fileNode) takeAttrsLocked(a attrs) {
	// A node this mount stored without learning the ETag (a batch's)
	// knows its size: another one is another version's.
	unknownOther := n.attr.etag == "" && a.etag != "" && a.size != n.attr.size && n.stored
	if unknownOther && n.fsys.opts.WritebackCache {
		n.superseded, n.attrAt = true, time.Now()
		return
	}
	if a.etag != n.attr.etag && a.etag != "" && n.attr.etag != "" && !n.ownVersion(a.etag) {
		if n.fsys.opts.WritebackCache {
			n.superseded, n.attrAt = true, time.Now()
			return
		}
		n.replacedElsewhere++
	}
	n.attr, n.attrAt, n.stored = a, time.Now(), true
}

// errSuperseded: the node's version is no longer the store's, and under
// the writeback cache it cannot take another (see fileNode.superseded).
var errSuperseded = errors.New("another client replaced the file: it is looked up again")

// supersededLocked reports a node whose open must fail with ESTALE, so
// that the kernel looks its name up again (see fileNode.superseded).
func (n *fileNode) supersededLocked() bool {
	return (n.superseded || n.diverged) && !n.local()
}

// dropKernelCacheLater has the kernel drop its pages and attributes of
// the file, which are of another version than the content here: writes
// would go into pages of the old one beside the new, and reads of them
// mix the two. Not while the request at hand runs: the kernel may hold
// its pages locked until it is answered.
func (n *fileNode) dropKernelCacheLater() {
	n.cachedETag = ""
	if n.dropping {
		return // one under way will do: it runs after this request
	}
	n.dropping = true
	go func() {
		n.NotifyContent(0, 0)
		n.mu.Lock()
		n.dropping = false
		n.mu.Unlock()
	}()
}

// revalidateLocked takes the object's attributes from a HEAD.
func (n *fileNode) revalidateLocked(ctx context.Context, key string) error {
	o, err := n.fsys.store.Head(ctx, key)
	if err != nil {
		return err
	}
	n.takeAttrsLocked(n.fsys.attrsOf(o, syscall.S_IFREG))
	if n.superseded {
		return errSuperseded
	}
	if n.attr.size > n.kernelSize {
		// No reply carries these to the kernel, which goes on with the
		// size it was told: a longer version's reads would end there.
		// It is told to ask again (the attributes only: no page lock is
		// taken). Not for a shorter version: a short READ tells the
		// kernel the new end, unless attributes changed meanwhile, when
		// it pads the page with zeros up to the old size.
		n.NotifyContent(-1, 0)
	}
	return nil
}

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	stale := !n.local() && n.stored && time.Since(n.attrAt) > n.fsys.opts.StatTTL
	n.mu.Unlock()
	if stale {
		ctx, cancel := n.fsys.patient(ctx)
		defer cancel()
		o, err := n.fsys.store.Head(ctx, n.key())
		if err != nil {
			return errno(err)
		}
		n.refresh(n.fsys.attrsOf(o, syscall.S_IFREG))
	}
	n.fillAttr(&out.Attr)
	return 0
}

// fillAttr answers with the attributes the node holds, asking no one.
func (n *fileNode) fillAttr(out *fuse.Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tellLocked(n.shownLocked(), out)
}

// tellLocked fills out with a, and remembers that the kernel has it.
func (n *fileNode) tellLocked(a attrs, out *fuse.Attr) {
	n.fsys.fill(a, out)
	n.shown, n.kernelSize = a, a.size
}

// shownLocked is the version the kernel is told of: the node's, unless
// another client replaced the one the kernel was told of last by a
// shorter version while every open handle here is on the old one and
// some have read from it. Told of the shorter size, the kernel would end
// those handles' reads where the new version ends, without asking the
// mount: bytes of one version, cut short, as if the file had ended. Told
// of theirs, they read on what the page cache holds of it, then fail with
// ESTALE where the mount is asked. A handle on another version (one
// opened since, or one that had not read and moved on) ends the hold:
// the page cache and the size, one of each per inode, go to the version
// the store holds (openHandle tells the kernel to ask again).
func (n *fileNode) shownLocked() attrs {
	a := n.attr
	a.size = n.size()
	old := n.shown
	if n.local() || old.etag == "" || old.etag == a.etag || old.size <= a.size || n.ownVersion(a.etag) {
		return a
	}
	held := false
	for h := range n.handles {
		if h.pin.etag != old.etag {
			return a
		}
		held = held || h.pin.used
	}
	if held {
		return old
	}
	return a
}

// kernelWriteTimeLocked says whether in is the kernel's own word of when
// the file was written, under the writeback cache, where the kernel keeps
// the mtime and sends it as writes are written back and before a close
// (fuse_flush_times: mtime and ctime, without atime, naming the open
// file), of content not uploaded yet: a time within its writing, which
// its upload records anyway. A program's utimensat never names a file
// (only ftruncate does, with a size), so a time a program set, even
// within the writing, is stored. Taken as set, the kernel's would cost a
// file stored in parts a copy of the object onto itself to store it
// (settleStreamedMetaLocked).
func (n *fileNode) kernelWriteTimeLocked(in *fuse.SetAttrIn) bool {
	t, _ := in.GetMTime()
	_, atime := in.GetATime()
	_, ctime := in.GetCTime()
	_, fh := in.GetFh()
	_, size := in.GetSize()
	if !n.fsys.opts.WritebackCache || atime || !ctime || !fh || size || !n.upload.pending() {
		return false
	}
	// The kernel's clock for inode times is coarse: a tick of slack.
	const slack = time.Second
	return !t.Before(n.upload.dirtySince().Add(-slack)) && !t.After(time.Now().Add(slack))
}

func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if size, ok := in.GetSize(); ok {
		if err := n.truncateLocked(ctx, int64(size)); err != nil {
			return toErrno(err)
		}
		// truncate(2) on a path is complete when it returns; ftruncate(2)
		// on an open file is uploaded with the rest at flush or fsync.
		// (Counting writers would not do: the kernel sends RELEASE after
		// close(2) returns, so a closed file may still look open.)
		if fh == nil {
			if errno := n.syncLocked(ctx); errno != 0 {
				return errno
			}
		}
	}
	a := n.attr
	if n.fsys.applySetattr(&a, in) {
		if _, ok := in.GetMTime(); ok && !n.kernelWriteTimeLocked(in) {
			n.mtimeSet = true
		}
		if !n.upload.pending() && n.stored {
			var err error
			if a, err = n.rewriteMetadataLocked(ctx, a, in); err != nil {
				return errno(err)
			}
			n.mtimeSet = false
			noteInParent(&n.Inode, dirEntry{obj: objectFor(n.key(), a)})
		}
		n.attr, n.attrAt = a, time.Now()
	}
	// A change here makes the version this mount's own: no hold.
	a = n.attr
	a.size = n.size()
	n.tellLocked(a, &out.Attr)
	return 0
}

// rewriteMetadataLocked stores a's metadata (a chmod, chown or utimes)
// by copying the object onto itself, on the condition that it is still
// the version a describes: should another writer have replaced it, the
// change in is applied to that version's attributes instead, so that
// nothing the other writer set is overwritten with what this mount had.
func (n *fileNode) rewriteMetadataLocked(ctx context.Context, a attrs, in *fuse.SetAttrIn) (attrs, error) {
	key, leave, err := n.fsys.gate.enterAt(n.linkedKey)
	if err != nil {
		return a, err
	}
	defer leave()
	o, err := n.fsys.store.Copy(ctx, key, a.etag, key, a.metadata())
	if errors.Is(err, store.ErrChanged) {
		if err = n.revalidateLocked(ctx, key); err != nil {
			return a, err
		}
		a = n.attr
		n.fsys.applySetattr(&a, in)
		o, err = n.fsys.store.Copy(ctx, key, a.etag, key, a.metadata())
	}
	if err != nil {
		return a, err
	}
	n.own.note(o.ETag)
	if n.base == a.etag {
		n.base = o.ETag // the copy is the same content
	}
	a.etag = o.ETag
	return a, nil
}

// opensForWriting says whether an open with flags changes the file: one
// for writing, or one that truncates it. Linux truncates a file opened
// O_RDONLY|O_TRUNC too (given write permission), and with FUSE's atomic
// O_TRUNC it leaves that to the mount, setting its own size to 0: the
// handle is then a writer's, whose close uploads the empty file.
func opensForWriting(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	writable := opensForWriting(flags)
	if n.fsys.opts.ReadOnly && writable {
		return nil, 0, syscall.EROFS
	}
	n.mu.Lock()
	superseded := n.supersededLocked()
	n.mu.Unlock()
	if superseded {
		return nil, 0, syscall.ESTALE // the kernel looks the name up again
	}
	if flags&syscall.O_TRUNC != 0 {
		n.mu.Lock()
		err := n.truncateLocked(ctx, 0)
		if err == nil {
			n.kernelSize = 0 // the kernel truncates too
		}
		n.mu.Unlock()
		if err != nil {
			return nil, 0, toErrno(err)
		}
	}
	if !writable {
		n.noteOpenedForReading()
	}
	fh, fuseFlags := n.openHandle(flags)
	return fh, fuseFlags, 0
}

// openHandle registers an open and says whether the kernel may keep its
// cached pages: only when the object is the one they were read from.
func (n *fileNode) openHandle(flags uint32) (*handle, uint32) {
	writable := opensForWriting(flags)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opens++
	if writable {
		n.writers++
	}
	var fuseFlags uint32
	if n.pagesCurrentLocked() {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	if !writable {
		// A reader's close has nothing to flush (no locks are the
		// mount's: the kernel keeps them), and the FLUSH would be one
		// of the four round trips a small file's read costs.
		fuseFlags |= fuse.FOPEN_NOFLUSH
	}
	// Kept or dropped, the pages are of this content from now on.
	n.cachedETag = n.attr.etag
	if n.local() {
		n.cachedETag = pagesLocal
	}
	inherited := n.inheritedPages
	if inherited {
		// The pages may hold writes a dead predecessor never uploaded,
		// or be of a version another client replaced meanwhile; and this
		// open may be a handle's revival, which the kernel never sees
		// (takeover.FS): they are not of the content now, and the next
		// open drops them. Nor is the size the kernel's, whatever the
		// revival told itself: the kernel is told to ask for the
		// attributes again, now and at the next open (no page lock
		// taken). Dropping the pages now would race that: the drop has
		// the kernel discard the answer of an attributes request under
		// way, and a read then ends at the old size. So a revived
		// handle may still read what the kernel kept of it.
		n.inheritedPages, n.cachedETag, n.kernelSize = false, "", -1
		n.NotifyContent(-1, 0)
	}
	h := &handle{node: n, writable: writable, append: flags&syscall.O_APPEND != 0, r: reader{fsys: n.fsys}}
	h.pin.follow(n)
	if n.handles == nil {
		n.handles = map[*handle]struct{}{}
	}
	n.handles[h] = struct{}{}
	if !inherited && !n.local() && n.kernelSize != n.attr.size {
		// The kernel has the size of another version (held for handles
		// reading it, or told before another client replaced it): the
		// new handle reads the store's, and must not stop at the old
		// one's end nor be answered short of it.
		n.NotifyContent(-1, 0) // the attributes only: no page lock taken
	}
	// With the pages kept, the kernel may answer reads from this version
	// without asking: the handle has read from it.
	h.pin.used = fuseFlags&fuse.FOPEN_KEEP_CACHE != 0
	return h, fuseFlags
}

// pagesLocal is cachedETag while the kernel's pages are of the local
// content: writes and truncations go through them, so they stay right.
const pagesLocal = "\x00local"

// pagesCurrentLocked says the kernel's pages of the file are of its
// content, so that an open may keep them. An open that has the kernel
// drop them is not harmless: a WRITE of an appender on its way (the
// kernel copied its bytes into a page it then drops) is not in the page
// the next READ caches, which has zeros where the WRITE goes, and the
// kernel moves the file's end past them when the WRITE ends.
func (n *fileNode) pagesCurrentLocked() bool {
	if n.local() {
		return n.cachedETag == pagesLocal
	}
	return n.attr.etag != "" && n.attr.etag == n.cachedETag
}

// keepForUnlink is called before the object is deleted or replaced:
// open handles keep reading the content from a local copy, as POSIX
// promises. The file is marked unlinked only once S3 agrees
// (markUnlinked): should the delete fail, it is still the file at its
// name, and what is written to it is still uploaded.
func (n *fileNode) keepForUnlink(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// Out of the journal before the object goes: a crash after the
	// delete must not bring the file back (journalAgain, should the
	// delete fail).
	n.settleJournalLocked()
	if n.opens > 0 && !n.local() && n.stored && n.attr.size <= n.fsys.opts.StagingLimit/4 {
		st, _, err := n.fsys.loadStaging(ctx, n.key(), n.attr.etag, n.attr.size)
		if err == nil {
			n.staging = st
			if n.cachedETag == n.attr.etag {
				n.cachedETag = pagesLocal // the copy is of the pages' version
			}
		}
	}
	if n.stream != nil {
		if err := n.toStaging(ctx); err != nil {
			n.dropLocal()
		}
	}
}

// markUnlinked records that the file has no name any more: nothing of it
// is uploaded from now on.
func (n *fileNode) markUnlinked() {
	n.mu.Lock()
	n.settleJournalLocked()
	if n.opens == 0 {
		n.dropLocal()
	}
	n.unlinked, n.stored = true, false
	n.upload.settled()
	// Open handles without a local copy (too large to keep) read nothing
	// more: their reads fail with ESTALE (handle.Read). The kernel's
	// pages must not answer some of them and not the others. Dropped
	// before the unlink is answered, so that no read after it finds
	// them: the unlink holds none of the file's pages, and READs are
	// answered meanwhile. Not on a predecessor's connection: there a READ
	// holding its pages may wait for its handle's revival, which waits
	// for this unlink (takeover.FS), so they go just after it.
	unkept := n.opens > 0 && !n.local()
	if unkept {
		n.cachedETag = ""
	}
	if unkept && n.fsys.inherited {
		n.dropKernelCacheLater()
		unkept = false
	}
	n.mu.Unlock()
	if unkept {
		n.NotifyContent(0, 0)
	}
}

func toErrno(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	if errors.Is(err, errNoName) {
		return syscall.ESTALE
	}
	return errno(err)
}

func objectFor(key string, a attrs) store.Object {
	return store.Object{Key: key, Size: a.size, ETag: a.etag, LastModified: a.mtime, Metadata: a.metadata()}
}
