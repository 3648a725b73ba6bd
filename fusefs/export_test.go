package fusefs

import (
	"syscall"
	"time"
)

// PollUntil polls cond until it holds (true) or d has passed (false).
var PollUntil = pollUntil

// NewNameStreak is for tests of the lookups that take names for new.
const NewNameStreak = newNameStreak

// HoldsListing reports whether the directory name, in the root, holds a
// listing.
func HoldsListing(f *FS, name string) bool {
	return listingOf(f, name, func(l *listing) bool { return l != nil })
}

// HoldsCompleteListing reports whether the directory name, in the root,
// holds a listing the store's whole answer came into.
func HoldsCompleteListing(f *FS, name string) bool {
	return listingOf(f, name, func(l *listing) bool { return l != nil && l.complete })
}

// listingOf asks is of the listing the directory name, in the root,
// holds now, under the directory's lock.
func listingOf(f *FS, name string, is func(*listing) bool) bool {
	return underDirLock(f, name, func(d *dirNode) bool { return is(d.listCache) })
}

// underDirLock asks is of the directory name, in the root, under its
// lock (false when there is no such directory).
func underDirLock(f *FS, name string, is func(*dirNode) bool) bool {
	ch := f.root.GetChild(name)
	if ch == nil {
		return false
	}
	d := ch.Operations().(*dirNode)
	d.mu.Lock()
	defer d.mu.Unlock()
	return is(d)
}

// Relisting reports whether the directory name, in the root, is being
// listed again now (relist).
func Relisting(f *FS, name string) bool {
	return underDirLock(f, name, func(d *dirNode) bool { return d.relisting != nil })
}

// ClusterLookups is how many lookups by name make lookups cluster.
const ClusterLookups = clusterLookups

// SetClusterLimit lowers the size of directory that clustered lookups
// list, so that tests reach it cheaply. Call it before the lookups.
func SetClusterLimit(f *FS, n int) { f.clusterLimit = n }

// SetClusterWait sets how long a lookup waits for a clustered listing.
func SetClusterWait(f *FS, d time.Duration) { f.clusterWait.Store(int64(d)) }

// SetMaxParts lowers S3's limit on the parts of one upload, so that tests
// reach it cheaply. Call it before writing.
func SetMaxParts(f *FS, n int) { f.maxParts = n }

// StagedBytes is what staging files (spooled parts included) take now.
func StagedBytes(f *FS) int64 { return f.staged.Load() }

// PartBufferBytes is what the part buffers mapped now take, in use or
// kept for reuse.
func PartBufferBytes(f *FS) int64 { return f.partBuffers().pool.Mapped() }

// MetaLookahead bounds the HEADs an open directory sends ahead of lookups.
const MetaLookahead = metaLookahead

// PrefetchStalls counts the times an open directory's HEADs reached
// MetaLookahead and waited.
func PrefetchStalls(f *FS) int64 { return f.prefetchStalls.Load() }

// WithInterruptGrace is o with an interrupted request going on for d
// (interruptGrace): a loaded machine's S3 may take longer than the grace.
func WithInterruptGrace(o Options, d time.Duration) Options {
	o.waits.interruptGrace = d
	return o
}

// WithFirstBufferWait is o with writers waiting up to d for memory before
// they spill to disk (firstBufferWait).
func WithFirstBufferWait(o Options, d time.Duration) Options {
	o.waits.firstBufferWait = d
	return o
}

// WithReorderWait is o with a READ that overtook an earlier one waiting
// up to d for it (reorderWait).
func WithReorderWait(o Options, d time.Duration) Options {
	o.waits.reorderWait = d
	return o
}

// HeldBackByRenames counts the changes waiting for a rename to end.
func HeldBackByRenames(f *FS) int { return f.gate.heldBack() }

// KeepsPages reports whether an open of the file name, in the root,
// would let the kernel keep its pages of it (pagesCurrentLocked).
func KeepsPages(f *FS, name string) bool {
	return underFileLock(f, name, (*fileNode).pagesCurrentLocked)
}

// underFileLock asks is of the file name, in the root, under its lock.
func underFileLock[T any](f *FS, name string, is func(*fileNode) T) T {
	n := f.root.GetChild(name).Operations().(*fileNode)
	n.mu.Lock()
	defer n.mu.Unlock()
	return is(n)
}

// ForgetEntry has the kernel forget the name in the root, as when its
// entry expires: the next path through it looks it up again. A name the
// kernel does not hold is forgotten already.
func ForgetEntry(f *FS, name string) error {
	if errno := f.root.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
		return errno
	}
	return nil
}

// RequestBufferBytes is what the mount's request buffers have mapped.
func RequestBufferBytes(f *FS) int64 { return f.requestBuffers().mapped() }

// PassStopDeadline makes StopBy's deadline now, as at the instant it
// passes, before its timer has run.
func PassStopDeadline(f *FS) {
	s := &f.stopping
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = time.Now()
}

// Opens is how many opens the mount holds of the file name, in the root;
// a RELEASE holds the file's lock until it has dealt with what the last
// close left.
func Opens(f *FS, name string) int {
	return underFileLock(f, name, func(n *fileNode) int { return n.opens })
}
