package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/objfuse/objfuse/fusefs/store"
)

// startCreated makes a new file's content empty and ready to stream.
func (n *fileNode) startCreated() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropLocal()
	n.stream = n.fsys.newStream(n.linkedKey)
	n.attr.size = 0
	n.upload.written()
	n.stored = false
	n.cachedETag = pagesLocal // the kernel has no pages of a new file
}

// startEmptyLocked makes the content empty and ready to stream, or for
// a file without a name, which is never uploaded, an empty staging file.
func (n *fileNode) startEmptyLocked() error {
	current := n.pagesCurrentLocked()
	kept := n.takeJournaledLocked()
	n.dropLocal()
	n.frozen = kept
	n.attr.size = 0
	n.upload.written()
	n.cachedETag = ""
	if current {
		n.cachedETag = pagesLocal
	}
	if !n.unlinked {
		n.stream = n.fsys.newStream(n.linkedKey)
		return nil
	}
	st, err := n.fsys.newStaging()
	if err != nil {
		return err
	}
	n.staging = st
	return nil
}

// dropLocal discards local content.
func (n *fileNode) dropLocal() {
	if n.cachedETag == pagesLocal {
		// The kernel's pages are of the content here: of the version
		// uploaded last, unless some of it never was.
		n.cachedETag = ""
		if !n.upload.pending() {
			n.cachedETag = n.attr.etag
		}
	}
	if n.stream != nil {
		n.stream.abort()
		n.stream = nil
	}
	if n.staging != nil {
		n.staging.Close()
		n.staging = nil
	}
	n.dropFrozenLocked()
	n.upload.settled()
	n.base = store.AnyVersion
}

// toStaging moves the content to a staging file: from the stream's
// buffer, or by first completing the stream's upload and downloading it
// back when parts already went up, or from the object.
func (n *fileNode) toStaging(ctx context.Context) error {
	ctx = uninterruptible(ctx)
	if n.staging != nil {
		return nil
	}
	if n.stream != nil && !n.stream.started() {
		st, err := n.stream.staged()
		if err != nil {
			return err
		}
		n.attr.size = n.stream.size
		n.stream.release()
		n.stream = nil
		n.staging = st
		n.stagedWriteLocked(0, n.attr.size) // what the writers wrote so far
		return nil
	}
	if n.stream != nil {
		if errno := n.syncLocked(ctx); errno != 0 {
			return errno
		}
	}
	key, err := n.linkedKey()
	if err != nil {
		return err
	}
	told := n.attr.etag
	current := n.pagesCurrentLocked()
	st, size, err := n.fsys.loadStaging(ctx, key, n.attr.etag, n.attr.size)
	// Another writer replaced the object since its attributes were read:
	// the change starts from the version there now. A file replaced over
	// and over may change again while it loads: a few tries, then ESTALE.
	for try := 0; errors.Is(err, store.ErrChanged) && try < loadTries; try++ {
		if err = n.revalidateLocked(ctx, key); err == nil {
			st, size, err = n.fsys.loadStaging(ctx, key, n.attr.etag, n.attr.size)
		}
	}
	if err != nil {
		return err
	}
	if size != n.attr.size && n.fsys.opts.WritebackCache {
		// The kernel placed the write by the size it keeps, which is
		// another version's (see loadStaging): it would land amid
		// bytes it never saw. The next lookup makes a new inode.
		st.Close()
		n.superseded = true
		return errSuperseded
	}
	if size != n.attr.size {
		// The attributes were another version's size (see loadStaging).
		n.attr.size = size
		n.dropKernelCacheLater()
	}
	n.staging, n.base = st, n.attr.etag
	if n.attr.etag != told {
		n.dropKernelCacheLater()
	}
	if current && n.cachedETag != "" {
		n.cachedETag = pagesLocal // the copy is of the version the pages are
	} else {
		n.cachedETag = ""
	}
	return nil
}

// loadTries bounds the loads of a local copy that find the object
// replaced again.
const loadTries = 5

func (n *fileNode) truncateLocked(ctx context.Context, size int64) error {
	if size == n.size() && n.local() {
		return nil
	}
	n.beginChargeLocked()
	if size == 0 {
		if err := n.startEmptyLocked(); err != nil {
			return err
		}
		n.cachedETag = pagesLocal // the kernel empties its pages too
		return nil
	}
	if err := n.toStaging(ctx); err != nil {
		return err
	}
	if err := n.keepJournaledLocked(); err != nil {
		return err
	}
	if !n.extendLocked(ctx, size) {
		return syscall.ENOSPC // past the volume's capacity
	}
	if err := n.staging.Truncate(size); err != nil {
		return err
	}
	n.attr.size = size
	n.upload.written()
	return nil
}
