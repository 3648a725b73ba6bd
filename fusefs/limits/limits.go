// Package limits holds the filesystem's defaults that the mount options
// of a volume (volume.MountOptionTable) and the mounter pod's spec need
// too, apart from the filesystem itself: the CSI driver builds mounter
// pods and must not link a FUSE server to do it.
package limits

import "time"

// DefaultStagingLimit is the bound on a mount's staging files, in bytes,
// when none is given.
const DefaultStagingLimit = 10 << 30

// DefaultReadCacheMiB is the local cache of randomly read ranges a mount
// keeps unless told otherwise, in MiB of its staging directory: reading
// them again, after the kernel dropped its pages, costs a pread, not a
// GET. A mounter pod with little staging space gets less (spec).
const DefaultReadCacheMiB = 256

// RuntimeReserve is the memory a mounter needs beside its budget
// (--memory-limit-mib) and its inodes: the Go runtime, its code, go-fuse's
// request buffers and HTTP. Without GOMEMLIMIT, objfuse-mount takes its
// budget and this much as what the process may hold (the Go runtime's
// soft limit is that less the part buffers mapped outside its heap,
// offheap.Within), and a mounter pod's limit is shared out with this much
// off (spec).
const RuntimeReserve = 48 << 20

// The filesystem's defaults for what a volume's mount options may set.
const (
	DefaultFileMode    = 0o644
	DefaultDirMode     = 0o755
	DefaultStatTTL     = time.Second
	DefaultListTTL     = time.Second
	DefaultPartSize    = 8 << 20
	DefaultConcurrency = 4
	DefaultMemoryLimit = 64 << 20
)
