package fusefs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/objfuse/objfuse/fusefs/limits"
)

// Options tune a mounted filesystem. The zero value of every field means
// "the default"; WithDefaults fills them in.
type Options struct {
	// Prefix is the key prefix the mount's root shows ("" or "a/b/").
	Prefix string
	// UID and GID own objects that carry no owner metadata.
	UID, GID uint32
	// FileMode and DirMode are the permissions of objects without mode
	// metadata (defaults 0644 and 0755).
	FileMode, DirMode os.FileMode
	ReadOnly          bool
	// StatTTL is how long attributes and names are trusted, both by the
	// kernel and by our own caches. ListTTL is how long a directory
	// listing answers lookups (including "no such file").
	StatTTL, ListTTL time.Duration
	// PartSize is the multipart part size of streaming uploads and the
	// largest readahead chunk. Concurrency bounds parallel parts per file
	// and readahead chunks per reader.
	PartSize    int
	Concurrency int
	// MemoryLimit bounds the bytes held across the whole mount in written
	// data not yet uploaded (of files open, or closed asynchronously and
	// waiting for their upload) and in readahead chunks. Written data
	// beyond it waits for uploads to give memory back, or goes to
	// staging files. A limit too small to keep Concurrency parts
	// uploading while the next one fills has files stream their parts
	// through spool files instead (partsOnDisk).
	MemoryLimit int64
	// StagingDir holds local copies of files being randomly written;
	// StagingLimit bounds their total size (ENOSPC beyond it).
	StagingDir   string
	StagingLimit int64 // default DefaultStagingLimit
	// MaxInodes bounds the inodes the mount keeps for files, links and
	// directories the kernel looked up (default DefaultMaxInodes): past
	// it, those unused longest are handed back to the kernel to forget,
	// so that walking a large tree does not grow the mounter without
	// bound. About 1 KiB each (TestATreeWalkKeepsTheInodeBound: a walk
	// of 1,000,000 entries with 10,000 held grew the heap by 29 MiB).
	MaxInodes int
	// MaxRenameObjects bounds a directory rename; beyond it rename returns
	// EXDEV so that mv falls back to copy and delete.
	MaxRenameObjects int
	// AsyncClose makes close(2) return before the upload: the file goes up
	// right after, fsync still waits for it, and a failure surfaces on the
	// next close or fsync of that file and in a metric. For small-file
	// workloads that accept that trade. What a close acknowledged waits in
	// the journal at JournalDir, which outlives the process: the next
	// mount of the same journal uploads it. A file already streaming in
	// parts (larger than PartSize) is uploaded before close returns.
	AsyncClose bool
	// WritebackCache has the kernel keep written pages and send them in
	// large WRITEs (at writeback, and before a close or fsync returns),
	// rather than one WRITE per write call. The kernel then keeps its own
	// size and mtime of an inode and ignores the mount's, so an inode
	// stays with the version it was made for (and this mount's own
	// writes): a version another client wrote is given a new inode at
	// the name's next lookup (fileNode.superseded). A write past the
	// Capacity fails at close or fsync, as the kernel sends it only then.
	// The kernel's WRITEs of written-back pages are served concurrently,
	// so out of order, and a large file goes on in a staging file
	// (Stats.UnorderedSpills), whose parts go up as they are written
	// whole (Stats.EarlyParts, stagedParts): every WRITE is answered at
	// disk speed, and the upload overlaps the writing. Holding a WRITE
	// back until the ones before it came, to keep the stream, was
	// measured slower, as pages held under writeback stall the writer at
	// the kernel's dirty limit; and so was answering it at once with its
	// bytes held in memory until then, as the stream's waits for part
	// uploads then pace the writer through the kernel's throttling
	// (README, the writeback cache).
	WritebackCache bool
	// JournalDir is the journal's directory (default: objfuse-journal in
	// StagingDir). One mount at a time may use it.
	JournalDir string
	// ReadCacheSize, when above zero, keeps ranges read at random (not
	// sequential readahead) in a local file under ReadCacheDir (default
	// StagingDir), up to this many bytes, so that reading them again,
	// after the kernel dropped its pages, costs no GET.
	ReadCacheSize int64
	ReadCacheDir  string
	// NoSplice keeps readahead in buffers even when the store's bodies
	// could splice into pipes (an escape hatch; splicing is cheaper).
	NoSplice bool
	// Capacity, above zero, is the volume's size enforced as a quota
	// (quota.go); SetCapacity changes it. QuotaRefresh is how often the
	// usage is summed from a listing (default DefaultQuotaRefresh), and
	// CapacitySource, when set, is asked for the capacity at each sum:
	// the size recorded where an expansion writes it.
	Capacity       int64
	QuotaRefresh   time.Duration
	CapacitySource func(context.Context) (int64, error)
	Logger         *slog.Logger

	// waits are timing choices tests stretch (export_test.go), so that a
	// loaded machine cannot turn one into a failure.
	waits waits
}

// waits: see each default.
type waits struct {
	interruptGrace, firstBufferWait, reorderWait time.Duration
}

// DefaultMaxInodes is MaxInodes when none is given: some 100 MiB.
const DefaultMaxInodes = 100_000

// DefaultStagingLimit is StagingLimit when none is given.
const DefaultStagingLimit = limits.DefaultStagingLimit

// WithDefaults returns o with every unset field set to its default.
func (o Options) WithDefaults() Options {
	if o.FileMode == 0 {
		o.FileMode = limits.DefaultFileMode
	}
	if o.DirMode == 0 {
		o.DirMode = limits.DefaultDirMode
	}
	if o.StatTTL == 0 {
		o.StatTTL = limits.DefaultStatTTL
	}
	if o.ListTTL == 0 {
		o.ListTTL = limits.DefaultListTTL
	}
	if o.PartSize == 0 {
		o.PartSize = limits.DefaultPartSize
	}
	if o.Concurrency == 0 {
		o.Concurrency = limits.DefaultConcurrency
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = limits.DefaultMemoryLimit
	}
	if o.StagingDir == "" {
		o.StagingDir = os.TempDir()
	}
	if o.ReadCacheDir == "" {
		o.ReadCacheDir = o.StagingDir
	}
	if o.JournalDir == "" {
		o.JournalDir = filepath.Join(o.StagingDir, "objfuse-journal")
	}
	if o.StagingLimit == 0 {
		o.StagingLimit = DefaultStagingLimit
	}
	if o.MaxRenameObjects == 0 {
		o.MaxRenameObjects = 10000
	}
	if o.MaxInodes == 0 {
		o.MaxInodes = DefaultMaxInodes
	}
	if o.QuotaRefresh == 0 {
		o.QuotaRefresh = DefaultQuotaRefresh
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.waits.interruptGrace == 0 {
		o.waits.interruptGrace = interruptGrace
	}
	if o.waits.firstBufferWait == 0 {
		o.waits.firstBufferWait = firstBufferWait
	}
	if o.waits.reorderWait == 0 {
		o.waits.reorderWait = reorderWait
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	return o
}

// partsOnDisk reports whether streams fill their parts, past a small
// file's first MiB, in spool files in the staging area rather than in
// part buffers: when the memory limit cannot hold Concurrency parts
// uploading and the one being filled, as a mounter pod with a small
// memory limit has it. The bytes then sit in the kernel's page cache,
// which it writes back and reclaims under pressure, not in the
// mounter's memory; the cost is the CPU of writing each part to the page
// cache and reading it back. Such a stream holds up to Concurrency + 1
// parts of staging space, so this holds only where those fit in half the
// staging limit, as the larger parts of a huge file do
// (stream.partLimit); a part that finds no room when it starts fills in
// memory.
func (o Options) partsOnDisk() bool {
	parts := int64(o.Concurrency+1) * int64(o.PartSize)
	return o.MemoryLimit < parts && parts <= o.StagingLimit/2
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.PartSize < 5<<20 {
		return fmt.Errorf("part size %d is below S3's 5 MiB minimum", o.PartSize)
	}
	if o.PartSize > 5<<30 {
		return fmt.Errorf("part size %d is above S3's 5 GiB maximum", o.PartSize)
	}
	if o.Concurrency < 1 || o.Concurrency > 64 {
		return fmt.Errorf("concurrency %d is outside 1..64", o.Concurrency)
	}
	if o.MemoryLimit < int64(2*o.PartSize) {
		return fmt.Errorf("memory limit %d must hold at least two parts of %d bytes", o.MemoryLimit, o.PartSize)
	}
	if o.FileMode&^os.ModePerm != 0 || o.DirMode&^os.ModePerm != 0 {
		return fmt.Errorf("file and dir modes must be permission bits only")
	}
	if o.MaxInodes < 0 {
		return fmt.Errorf("MaxInodes %d: want a count, or 0 for the default", o.MaxInodes)
	}
	if o.ReadCacheSize < 0 {
		return fmt.Errorf("read cache size must not be negative")
	}
	if o.StatTTL < 0 || o.ListTTL < 0 {
		return fmt.Errorf("cache TTLs must not be negative")
	}
	if strings.HasPrefix(o.Prefix, "/") || strings.Contains(o.Prefix, "//") {
		return fmt.Errorf("prefix %q must be relative with no empty segments", o.Prefix)
	}
	for _, seg := range strings.Split(strings.TrimSuffix(o.Prefix, "/"), "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("prefix %q must not contain . or .. segments", o.Prefix)
		}
	}
	return nil
}
