package fusefs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/objfuse/objfuse/fusefs/store"
)

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx = uninterruptible(ctx) // a write may upload a part
	n := h.node
	n.mu.Lock()
	defer n.mu.Unlock()
	k, errno := h.writeLocked(ctx, data, off)
	if n.fsys.opts.WritebackCache && (errno != 0 || int(k) < len(data)) {
		// The kernel sends what a write(2) left in its pages later, and
		// heeds no short answer; the program heard of success long ago.
		// Every writer's close and fsync must fail now.
		if errno == 0 {
			errno = syscall.ENOSPC
		}
		n.upload.lose(fmt.Errorf("the kernel's write of %d bytes at %d: %w", len(data), off, errno))
		n.diverged = true // its size and pages hold what the store never got
		return 0, errno
	}
	return k, errno
}

func (h *handle) writeLocked(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := h.node
	if lost := n.upload.lostTo(); lost != nil {
		return 0, lostErrno(lost)
	}
	n.beginChargeLocked()
	if !n.local() {
		if n.attr.size == 0 && off == 0 && !h.append {
			if err := n.startEmptyLocked(); err != nil {
				return 0, n.writeFailed(err)
			}
		} else if err := n.toStaging(ctx); err != nil {
			return 0, toErrno(err)
		}
	}
	kernelOff := off // where the kernel puts the write in its pages
	// Under the writeback cache the kernel places appends at the end it
	// keeps, and sends them through any writer's handle: its offset holds.
	if h.append && off != n.size() && !n.fsys.opts.WritebackCache {
		// The kernel puts an O_APPEND write at the end it knows, which
		// another writer may have moved since: the end is the one of
		// the content here, loaded from the version the store holds.
		// The kernel's pages and size are wrong from here on.
		off = n.size()
		n.dropKernelCacheLater()
	}
	if fit := n.fitLocked(ctx, off, len(data)); fit < len(data) {
		if fit == 0 {
			return 0, syscall.ENOSPC // the volume's capacity: a short write first kept what fit
		}
		data = data[:fit]
	}
	if n.stream != nil && off != n.stream.size {
		if err := n.toStaging(ctx); err != nil {
			return 0, toErrno(err)
		}
		n.fsys.stats.UnorderedSpills.Add(1)
	}
	if n.stream != nil {
		k, err := n.stream.write(ctx, data, n.streamMetaLocked())
		switch _, full := noRoom(err); {
		case errors.Is(err, errNoMemory):
			if err := n.toStaging(ctx); err != nil {
				return 0, n.writeFailed(err)
			}
			n.fsys.stats.MemorySpills.Add(1) // and the write goes there, below
		case full && k > 0:
			// A short write keeps what fit; the next write hears why.
			data = data[:k]
		case err != nil:
			return 0, n.writeFailed(err)
		}
	}
	if n.stream == nil {
		if err := n.keepJournaledLocked(); err != nil {
			return 0, n.writeFailed(err)
		}
		if err := n.staging.WriteAt(data, off); err != nil {
			return 0, n.writeFailed(err)
		}
		n.stagedWriteLocked(off, int64(len(data)))
		n.attr.size = max(n.attr.size, off+int64(len(data)))
	}
	n.upload.written()
	n.kernelSize = max(n.kernelSize, kernelOff+int64(len(data)))
	n.fsys.stats.BytesWritten.Add(int64(len(data)))
	n.fsys.stats.Writes.Add(1)
	return uint32(len(data)), 0
}

// writeFailed records a failure that loses written data, so that close and
// fsync report it too.
func (n *fileNode) writeFailed(err error) syscall.Errno {
	if e, full := noRoom(err); full {
		return e // nothing was written; what came before is intact
	}
	if errors.Is(err, store.ErrUnavailable) || n.stream != nil {
		n.upload.lose(err)
	}
	n.fsys.opts.Logger.Error("write failed", "key", n.key(), "err", err)
	return syscall.EIO
}

// lostErrno is what writers hear of content lost to err: ENOSPC or EFBIG
// when it did not fit (a full volume says so), else EIO.
func lostErrno(err error) syscall.Errno {
	if e, full := noRoom(err); full {
		return e
	}
	return syscall.EIO
}

// noRoom reports whether err is a full staging disk (ENOSPC, EDQUOT; it
// comes wrapped in the file's *PathError) or a file at the most S3 takes
// (EFBIG): the write failed without losing anything written before.
func noRoom(err error) (syscall.Errno, bool) {
	e := syscall.Errno(0)
	if errors.As(err, &e) && (e == syscall.ENOSPC || e == syscall.EDQUOT || e == syscall.EFBIG) {
		return e, true
	}
	return 0, false
}

// Flush runs on every close(2): the object is complete when close returns.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if !h.writable {
		return 0
	}
	if h.node.fsys.asyncClose() {
		// The upload happens on RELEASE, which the kernel sends after
		// close(2) has returned; only an earlier failure is reported now.
		// The content waits in the journal, which outlives the process.
		n := h.node
		n.mu.Lock()
		defer n.mu.Unlock()
		if lost := n.upload.lostTo(); lost != nil {
			n.upload.takeOwed()
			return lostErrno(lost)
		}
		if n.upload.takeOwed() != nil {
			return syscall.EIO
		}
		if n.upload.pending() && !n.unlinked {
			if err := n.journalLocked(ctx); err != nil {
				if !errors.Is(err, errCloseWaits) {
					n.fsys.opts.Logger.Warn("cannot journal a file closed asynchronously; the close waits for its upload", "key", n.key(), "err", err)
				}
				return n.syncForWriterLocked(ctx)
			}
			n.upload.closedAsync()
		}
		return 0
	}
	return h.node.syncForWriter(ctx)
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.node.syncForWriter(ctx)
}
