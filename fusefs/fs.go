package fusefs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"golang.org/x/sync/semaphore"

	"github.com/objfuse/objfuse/fusefs/readcache"
	"github.com/objfuse/objfuse/fusefs/store"
)

// FS is one mounted bucket or prefix.
type FS struct {
	store     store.Store
	opts      Options
	mountTime time.Time
	root      *dirNode
	// groupFixed: every node shows opts.GID as its group (SetMountGroup).
	groupFixed bool

	// gate keeps directory renames and changes under them apart.
	gate *keyGate
	// placed holds where renames put inodes go-fuse has not moved yet
	// (placement); placing counts them.
	placed  sync.Map
	placing atomic.Int64

	// memory bounds bytes written and not yet uploaded, and readahead.
	memory *semaphore.Weighted
	// uploadingBytes is the memory held by uploads under way, which they
	// give back when they end; memoryStalled is set when a writer waited
	// for memory in vain, and cleared when an upload ends (see
	// reserveWritten).
	uploadingBytes atomic.Int64
	memoryStalled  atomic.Bool
	// inherited: the connection was a predecessor's (ServeTakeover), so
	// the kernel may know a node before this process first finds it, and
	// have pages of it (fileNode.inheritedPages).
	inherited bool
	// staged counts bytes in local staging files, bounded by StagingLimit.
	staged atomic.Int64
	// journal keeps files closed asynchronously until their upload; nil
	// without AsyncClose.
	journal *journal
	// restoredNodes are the files restored from the journal, for Mount
	// to upload once it serves.
	restoredNodes []*fileNode
	// prefetchStalls counts the times an open directory's HEADs reached
	// metaLookahead and waited for lookups (a test's view of the bound).
	prefetchStalls atomic.Int64
	// maxParts is S3's limit on the parts of one upload; tests lower it.
	maxParts int
	// clusterLimit bounds the names a listing started by clustered
	// lookups keeps (see dirNode.clustering); tests lower it.
	clusterLimit int
	// clusterWait bounds how long a lookup waits for a clustered
	// listing (see clusterWait); tests raise it.
	clusterWait atomic.Int64 // a time.Duration
	// cachedEntries bounds the names a directory's listing keeps for
	// the lookups after it (cachedEntriesFor).
	cachedEntries int
	// listingsLackMetadata: a listing showed a file without its
	// metadata, so lookups that cluster list nothing (dirNode.clustering).
	listingsLackMetadata atomic.Bool

	bufOnce sync.Once
	bufs    *buffers
	// reqBufOnce makes reqBufs, the buffers requests are read into.
	reqBufOnce sync.Once
	reqBufs    *requestBuffers

	// inodes keeps the inode table within Options.MaxInodes.
	inodes *inodeTable

	// quota enforces Options.Capacity; nil without one.
	quota *quota

	// cache holds ranges read at random; nil without Options.ReadCacheSize.
	cache *readcache.Cache
	// peeked holds what lookups' peeks brought for the READs that follow.
	peeked peeked

	// splicing: readahead chunks are pipes (read_pipes.go).
	splicing    bool
	reorderWait time.Duration

	stats Stats
	// lostUpload describes the latest failed upload no writer waited for
	// (Health).
	lostUpload atomic.Pointer[string]
	// lostFiles are the keys of the latest lost uploads (Health).
	lostMu    sync.Mutex
	lostFiles []string
	// tally: a file moves from pending to lost under it, and Health reads
	// both under it (fileNode.giveUpLocked).
	tally sync.Mutex
	// lastConflict describes the latest change kept under a conflict
	// name (Health).
	lastConflict atomic.Pointer[string]

	stopping stopState
}

// Stats are the filesystem's counters, exported as metrics.
type Stats struct {
	HiddenKeys   atomic.Int64 // keys that cannot be file names
	UploadErrors atomic.Int64 // failed uploads reported to writers
	BytesRead    atomic.Int64
	BytesWritten atomic.Int64
	// Writes counts WRITE requests: one per write call, unless the
	// kernel's writeback cache gathers them (Options.WritebackCache).
	Writes          atomic.Int64
	Uploads         atomic.Int64
	PanicsRecovered atomic.Int64
	// AsyncUploadErrors are failed uploads no writer waited for: after an
	// asynchronous close, or of writes through a mapping that outlived its
	// descriptors.
	AsyncUploadErrors atomic.Int64
	// Conflicts are changes to a file that another writer replaced
	// meanwhile, kept under a conflict name instead (write_conflict.go).
	Conflicts atomic.Int64
	// BytesSpliced went from S3 into readahead pipes (never through
	// user space when the store splices).
	BytesSpliced atomic.Int64
	// CopiedReplies are READs from pipes whose bytes came in too many
	// pieces (small network packets) for a reply pipe, and were copied.
	CopiedReplies atomic.Int64
	// Peeks are lookups answered with a file's first bytes (peekHead).
	Peeks atomic.Int64
	// BytesFromCache were read from the read cache instead of S3.
	BytesFromCache atomic.Int64
	// BytesFromPeeks were read from what a lookup's peek brought, held
	// in memory for the READ.
	BytesFromPeeks atomic.Int64
	// BufferBytes is the memory held now in written data waiting for its
	// upload, in readahead chunks and in peeked bytes waiting for their
	// READ (a gauge, bounded by Options.MemoryLimit).
	BufferBytes atomic.Int64
	// MemorySpills are files continued in a staging file because the
	// memory limit had no room for their written data.
	MemorySpills atomic.Int64
	// UnorderedSpills are files continued in a staging file because a
	// write did not continue where the last one ended (random writes, or
	// WRITEs of the kernel's writeback served out of order: see
	// Options.WritebackCache).
	UnorderedSpills atomic.Int64
	// EarlyParts are parts of staging files uploaded while the file was
	// still written, as its writers wrote them whole (stagedParts).
	EarlyParts atomic.Int64
	// PendingUploads and PendingBytes are the files closed asynchronously
	// whose upload has not succeeded yet, and their size (gauges): they
	// are in the journal, and a successor uploads them should this
	// process die.
	PendingUploads atomic.Int64
	PendingBytes   atomic.Int64
}

// New returns a filesystem over st. Mount it with Mount or serve its Root
// with go-fuse directly.
func New(st store.Store, opts Options) (*FS, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	f := &FS{store: st, opts: opts, mountTime: time.Now(), memory: semaphore.NewWeighted(opts.MemoryLimit), gate: newKeyGate()}
	f.reorderWait = opts.waits.reorderWait
	f.peeked.fsys, f.peeked.ttl = f, peekedTTL
	f.stopping.init()
	f.maxParts = store.MaxParts
	f.clusterLimit = clusterLimit
	f.clusterWait.Store(int64(clusterWait))
	f.cachedEntries = cachedEntriesFor(opts.MemoryLimit)
	if sp, ok := st.(store.Splicer); ok && sp.Splices() && !opts.NoSplice && splice.Resizable() {
		f.splicing = true
	}
	if opts.ReadCacheSize > 0 {
		c, err := readcache.New(opts.ReadCacheDir, opts.ReadCacheSize)
		if err != nil {
			return nil, err
		}
		f.cache = c
	}
	if opts.AsyncClose {
		j, err := openJournal(opts.JournalDir, &f.stats)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.journal = j
	}
	f.inodes = newInodeTable(opts.MaxInodes)
	if opts.Capacity > 0 {
		f.quota = newQuota(f)
	}
	f.root = &dirNode{fsys: f}
	f.root.attr = f.dirAttrs()
	f.root.hasMarker = true // the root never needs a marker to exist
	return f, nil
}

// dirAttrs are the attributes of a directory no object describes.
func (f *FS) dirAttrs() attrs {
	return attrs{mode: syscall.S_IFDIR | uint32(f.opts.DirMode), uid: f.opts.UID, gid: f.opts.GID, mtime: f.mountTime}
}

// Close frees what the filesystem holds outside the Go heap (part
// buffers kept for reuse, the read cache's files, the journal's lock).
// Call it once the mount is gone.
func (f *FS) Close() error {
	f.peeked.close()
	f.partBuffers().pool.Close()
	f.requestBuffers().close()
	if f.quota != nil {
		f.quota.close()
	}
	if f.journal != nil {
		f.journal.close()
	}
	if f.cache != nil {
		return f.cache.Close()
	}
	return nil
}

// ReadCache is the read cache, or nil when there is none.
func (f *FS) ReadCache() *readcache.Cache { return f.cache }

// Root is the root directory node, for fs.Mount or fs.NewNodeFS.
func (f *FS) Root() fs.InodeEmbedder { return f.root }

// Stats returns the live counters.
func (f *FS) Stats() *Stats { return &f.stats }

// MountOptions are the go-fuse options objfuse mounts with. fsName is the
// source shown in mountinfo ("objfuse:bucket/prefix").
func (f *FS) MountOptions(fsName string) *fs.Options {
	ttl := f.opts.StatTTL
	negative := f.opts.ListTTL
	return &fs.Options{
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &negative,
		MountOptions: fuse.MountOptions{
			FsName:     fsName,
			Name:       "objfuse",
			AllowOther: true,
			// allow_other opens the mount to every local user; objfuse
			// checks no permission itself, so the kernel must check the
			// files' modes and owners (as the node plugin's mounts do).
			Options:  []string{"default_permissions"},
			MaxWrite: MaxRead, // also the largest READ
			// Outside the Go heap (requestBuffers).
			RequestBuffers: f.requestBuffers(),
			MaxReadAhead:   1 << 20,
			MaxBackground:  64,
			// Objects have no place for extended attributes.
			DisableXAttrs: true,
			// Replies from memory have Slices, which go-fuse writes
			// without trying a pipe; replies from pipes splice.
			DisableSplice:     !f.splicing,
			ExtraCapabilities: f.capabilities(),
			// Not the kernel's own page invalidation when attributes
			// bring a new mtime: it can drop a page holding a WRITE on its
			// way (fuse unlocks an up-to-date page before sending it), and
			// the READ that caches the page again has zeros where that
			// WRITE goes (TestANewMtimeKeepsTheKernelsPages). objfuse
			// says at each open whether the pages are of the content
			// (FOPEN_KEEP_CACHE), and drops them itself where they are not
			// (dropKernelCacheLater), so the mtime need not.
			DisabledCapabilities: fuse.CAP_AUTO_INVAL_DATA,
			PanicHandler: func(p any) fuse.Status {
				f.stats.PanicsRecovered.Add(1)
				// Called from go-fuse's deferred recover, still on the
				// panicking goroutine: the stack shows where it panicked.
				f.opts.Logger.Error("panic in FUSE handler; returning EIO", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				return fuse.EIO
			},
		},
	}
}

// capabilities are the FUSE capabilities asked for beyond go-fuse's.
func (f *FS) capabilities() uint64 {
	c := uint64(fuse.CAP_ATOMIC_O_TRUNC)
	if f.opts.WritebackCache {
		c |= fuse.CAP_WRITEBACK_CACHE
	}
	return c
}

// Mount mounts the filesystem at mountpoint (a directory, or /dev/fd/N for
// a FUSE handle opened by someone else) and returns the serving server.
func (f *FS) Mount(mountpoint, fsName string, directMount bool) (*fuse.Server, error) {
	o := f.MountOptions(fsName)
	o.DirectMount = directMount
	o.DirectMountStrict = directMount
	if f.opts.ReadOnly {
		o.Options = append(o.Options, "ro")
	}
	srv, err := fs.Mount(mountpoint, f.Root(), o)
	if err != nil {
		return nil, fmt.Errorf("mount %s at %s: %w", fsName, mountpoint, err)
	}
	f.uploadRestored()
	return srv, nil
}

// Flush uploads every file with pending writes. Called before unmount.
func (f *FS) Flush(ctx context.Context) error {
	var errs []error
	walkFiles(&f.root.Inode, func(n *fileNode) {
		if err := n.sync(ctx); err != 0 {
			errs = append(errs, fmt.Errorf("flush %s: %w", n.key(), err))
		}
	})
	return errors.Join(errs...)
}

func walkFiles(in *fs.Inode, fn func(*fileNode)) {
	for _, ch := range in.Children() {
		switch n := ch.Operations().(type) {
		case *fileNode:
			fn(n)
		case *dirNode:
			walkFiles(ch, fn)
		}
	}
}

// keyOf is the object key of the node at path p below the root. A node
// no longer linked under the root has none; it gets one no file can have
// (a "//" segment, which the mount hides, and MinIO refuses), so that
// whatever still asks the store about it finds nothing, and changes
// nothing of anyone's.
func (f *FS) keyOf(in *fs.Inode) string {
	p, linked := f.pathOf(in)
	if !linked {
		return f.opts.Prefix + orphanKey
	}
	return f.opts.Prefix + p
}

const orphanKey = "/objfuse-unlinked/"

// pathOf is in's path below the root, and false for a node no longer
// linked under it (unlinked, or replaced by a rename): such a node has no
// key, and go-fuse's Inode.Path would make one up.
func (f *FS) pathOf(in *fs.Inode) (string, bool) {
	var names []string
	for p := in; p != &f.root.Inode; {
		name, parent := f.parentOf(p)
		if parent == nil {
			return "", false
		}
		names = append(names, name)
		p = parent
	}
	slices.Reverse(names)
	return strings.Join(names, "/"), true
}

// resolved is what a name turned out to be in the store.
type resolved struct {
	isDir bool
	obj   store.Object // the file, or the directory's marker (Key empty if none)
}

// ask is how resolve asks the store about a name.
type ask int

const (
	// fileFirst: a HEAD that finds the object settles it, so that a stat
	// of a file costs one request. Only when there is no such object does
	// a one-key LIST look for a directory.
	fileFirst ask = iota
	// fileFirstPeekRange and fileFirstPeekWhole are fileFirst with a peek
	// for the HEAD: the file's first bytes come with its attributes (see
	// peeks and peekHow).
	fileFirstPeekRange
	fileFirstPeekWhole
	// fileFirstAtOnce gives fileFirst's answer, with both requests sent at
	// once: for a name likely new, whose HEAD will find nothing, it saves
	// a round trip.
	fileFirstAtOnce
	// directoryWins sends both at once, and when both a file and a
	// directory exist under one name the directory wins and the file is
	// hidden: it holds more, and a name can only be one thing. Listings
	// apply the same rule, so a name a listing showed as a directory
	// stays one. For a name known to be a directory, or a change that
	// must be sure.
	directoryWins
)

// fileFirstPeek is the fileFirst ask that peeks as p says.
func fileFirstPeek(p peekHow) ask {
	switch p {
	case peekRange:
		return fileFirstPeekRange
	case peekWhole:
		return fileFirstPeekWhole
	}
	return fileFirst
}

// peek is how a fileFirst ask peeks.
func (a ask) peek() peekHow {
	switch a {
	case fileFirstPeekRange:
		return peekRange
	case fileFirstPeekWhole:
		return peekWhole
	}
	return noPeek
}

// resolve finds out what key is: a directory (a marker "key/" or any key
// below "key/"), a file or symlink (an object "key"), or nothing.
func (f *FS) resolve(ctx context.Context, key string, how ask) (resolved, error) {
	if how == fileFirst || how == fileFirstPeekRange || how == fileFirstPeekWhole {
		head, err := f.peekHead(ctx, key, how.peek())
		if err == nil {
			return resolved{obj: head}, nil
		}
		if !errors.Is(err, store.ErrNotExist) {
			return resolved{}, err
		}
		first, found, err := f.first(ctx, key+"/")
		if err != nil {
			return resolved{}, err
		}
		if !found {
			return resolved{}, fmt.Errorf("resolve %q: %w", key, store.ErrNotExist)
		}
		return f.directory(ctx, key, first), nil
	}
	var (
		wg      sync.WaitGroup
		head    store.Object
		headErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		head, headErr = f.store.Head(ctx, key)
	}()
	first, found, listErr := f.first(ctx, key+"/")
	wg.Wait()
	if how == fileFirstAtOnce && !errors.Is(headErr, store.ErrNotExist) {
		// The HEAD settles it, as with fileFirst: the object, or its
		// error, whatever the listing said.
		if headErr != nil {
			return resolved{}, headErr
		}
		return resolved{obj: head}, nil
	}
	if listErr != nil {
		return resolved{}, listErr
	}
	if found {
		if headErr == nil {
			f.stats.HiddenKeys.Add(1)
		}
		return f.directory(ctx, key, first), nil
	}
	if headErr != nil {
		return resolved{}, headErr
	}
	return resolved{obj: head}, nil
}

// directory is key as a directory whose listing starts with first.
func (f *FS) directory(ctx context.Context, key string, first store.Entry) resolved {
	r := resolved{isDir: true}
	if !first.IsPrefix() && first.Key == key+"/" {
		r.obj = first.Object
		if r.obj.Metadata == nil {
			// A listing without metadata: read the marker's own.
			if o, err := f.store.Head(ctx, key+"/"); err == nil {
				r.obj = o
			}
		}
	}
	return r
}

// first is the first entry under prefix: one one-key page when the store
// can ask for one.
func (f *FS) first(ctx context.Context, prefix string) (store.Entry, bool, error) {
	if p, ok := f.store.(store.Prober); ok {
		return p.First(ctx, prefix)
	}
	for e, err := range f.store.List(ctx, prefix, "", false) {
		return e, err == nil, err
	}
	return store.Entry{}, false, nil
}

func errno(err error) syscall.Errno {
	if errors.Is(err, errSuperseded) {
		return syscall.ESTALE
	}
	return store.Errno(err)
}

// parentKey is the key of the directory holding key ("" for the top).
func parentKey(key string) string {
	d := path.Dir(key)
	if d == "." {
		return ""
	}
	return d + "/"
}

// SetMountGroup makes gid (a pod's fsGroup, known only when the node
// stages the volume) the group every file and directory shows, whatever
// group its metadata or its creator has, as a CIFS or NFS mount with gid=
// does and VOLUME_MOUNT_GROUP asks: a pod whose fsGroup it is owns the
// volume's contents through the group, also what pods with another
// fsGroup made before. What the objects' metadata says is kept for other
// mounts and clients (fill). Files without mode metadata get group
// read-write permissions, and directories group rwx and the
// set-group-ID bit that kubelet gives a volume's directories for an
// fsGroup. Call it before Mount.
func (f *FS) SetMountGroup(gid uint32) {
	f.opts.GID = gid
	f.opts.FileMode |= 0o060
	f.opts.DirMode |= 0o070
	f.groupFixed = true
	f.root.attr.gid = gid
	f.root.attr.mode |= 0o070
}
