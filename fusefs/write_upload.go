package fusefs

import (
	"context"
	"fmt"
	"maps"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/objfuse/objfuse/fusefs/store"
)

func (n *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return n.sync(ctx)
}

func (n *fileNode) sync(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.syncLocked(ctx)
}

// syncForWriter is sync for a writer's close(2) or fsync, which hears of
// a failure: the last RELEASE need not report it again.
func (n *fileNode) syncForWriter(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.syncForWriterLocked(ctx)
}

func (n *fileNode) syncForWriterLocked(ctx context.Context) syscall.Errno {
	e := n.syncLocked(ctx)
	n.upload.answered(e)
	return e
}

// syncLocked makes the object equal the local content. A failure is EIO
// to the caller and leaves the previous object as it was.
func (n *fileNode) syncLocked(ctx context.Context) syscall.Errno {
	ctx, cancel := n.fsys.uploadContext(ctx)
	defer cancel()
	if lost := n.upload.lostTo(); lost != nil {
		return lostErrno(lost)
	}
	if owed := n.upload.takeOwed(); owed != nil {
		n.fsys.opts.Logger.Error("reporting an earlier asynchronous upload failure", "key", n.key(), "err", owed)
		return syscall.EIO
	}
	if !n.upload.pending() || n.unlinked {
		return 0
	}
	// Inside the gate, no rename moves the key between here and the
	// upload's end (keyGate).
	key, leave, kerr := n.fsys.gate.enterAt(n.linkedKey)
	if kerr != nil {
		// Unlinking and renaming over a file mark it unlinked first.
		// Should one lose its name any other way, it is not stored under
		// a name made up for it, and its writer hears so on every flush.
		n.upload.lose(kerr)
		n.upload.failed(kerr)
		n.fsys.opts.Logger.Error("not uploading a file that lost its name; reporting EIO to the writer", "ino", n.StableAttr().Ino)
		return syscall.EIO
	}
	defer leave()
	a := n.attr
	if !n.mtimeSet {
		a.mtime = time.Now()
	}
	meta := a.metadata()
	var err error
	switch {
	case n.stream != nil:
		s := n.stream
		n.stream = nil
		o, ferr := s.finish(ctx, meta)
		if ferr == nil && s.uploadMeta != nil {
			o, ferr = n.settleStreamedMetaLocked(ctx, key, o, s.uploadMeta, &a)
		}
		if err = ferr; err == nil {
			a.size, a.etag = o.Size, o.ETag
			if n.cachedETag == pagesLocal {
				// The content is stored, no longer local: the pages
				// are of the version it became. (Left at pagesLocal,
				// the next open would have the kernel drop them, under
				// an appender's WRITE on its way.)
				n.cachedETag = o.ETag
			}
		} else {
			// The stream's data is gone with its aborted upload; the
			// writer hears of it on this and every later flush.
			n.upload.lose(err)
		}
	case n.staging != nil:
		size := n.attr.size
		o, perr := n.storeStagingLocked(ctx, key, size, meta, &a)
		if err = perr; err == nil {
			a.size, a.etag = size, o.ETag
			n.base = o.ETag
		}
	}
	if err != nil {
		err = n.fsys.stoppedError(ctx, err)
		n.upload.failed(err)
		n.fsys.stats.UploadErrors.Add(1)
		n.fsys.opts.Logger.Error("upload failed; reporting EIO to the writer", "key", key, "err", err)
		// Lost for good: a stream's data went with its upload, and past
		// the stop deadline nothing is tried again, not even by the
		// last RELEASE. Content still here before then is tried again
		// by the last RELEASE, which reports it if that fails too.
		if n.upload.lostTo() != nil || n.fsys.stopPassed() {
			n.upload.lose(err)
			n.giveUpLocked(err)
		}
		return syscall.EIO
	}
	n.fsys.stats.Uploads.Add(1)
	n.settleChargeLocked(true, a.size)
	n.settleJournalLocked()
	n.own.note(a.etag)
	n.attr, n.attrAt = a, time.Now()
	n.stored, n.mtimeSet = true, false
	n.superseded = false // the store holds this mount's version now
	n.upload.settled()
	noteInParent(&n.Inode, dirEntry{obj: objectFor(key, a)})
	return 0
}

// streamMetaLocked is the metadata a stream's upload begins with: the
// file's attributes, written now.
func (n *fileNode) streamMetaLocked() map[string]string {
	a := n.attr
	if !n.mtimeSet {
		a.mtime = time.Now()
	}
	return a.metadata()
}

// settleStreamedMetaLocked makes a, the attributes of a file just stored
// in parts (object o at key), those the object has. S3 fixes a multipart
// upload's metadata when it begins: its mtime, that of the first part,
// stands as the file's, so that it stays the same when the file is next
// looked up, on other mounts and in snapshots. An mtime, mode or owner
// set while the file streamed is stored by copying the object onto
// itself with it, as a chmod of a stored file is.
func (n *fileNode) settleStreamedMetaLocked(ctx context.Context, key string, o store.Object, began map[string]string, a *attrs) (store.Object, error) {
	if t, ok := parseMtime(began[metaMtime]); ok && !n.mtimeSet {
		a.mtime = t
	}
	final := a.metadata()
	if maps.Equal(final, began) {
		return o, nil
	}
	c, err := n.fsys.store.Copy(ctx, key, o.ETag, key, final)
	if err != nil {
		return o, fmt.Errorf("store the attributes set while %q was written: %w", key, err)
	}
	o.ETag = c.ETag
	return o, nil
}

// release ends one open. The last close drops local content: anything not
// uploaded by then was reported to the writer by flush.
func (n *fileNode) release(h *handle) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.handles, h)
	n.opens--
	if h.writable {
		n.writers--
	}
	if n.opens > 0 {
		return
	}
	n.uploadLeftLocked()
}

// uploadLeftLocked uploads what the last close left, if anything, and
// drops the local content.
func (n *fileNode) uploadLeftLocked() {
	switch {
	case n.upload.pending() && n.upload.lostTo() == nil && !n.unlinked:
		// With AsyncClose this is the upload close(2) did not wait for
		// (the kernel sends RELEASE after close returns); otherwise the
		// file was written through a mapping that outlived its
		// descriptors, which no FLUSH follows. Either way no writer waits
		// to hear of a failure: it is reported as a loss, unless a
		// writer's close or fsync already returned it and nothing was
		// written since.
		closedAsync := n.upload.lastRelease()
		ctx, cancel := n.fsys.backgroundUploadContext()
		if n.syncLocked(ctx) != 0 {
			if closedAsync {
				n.upload.owe(n.upload.lastFailure()) // the next close(2) or fsync hears too
			}
			n.giveUpLocked(n.upload.lastFailure()) // unless syncLocked did, or it was told
		}
		cancel()
	case n.upload.awaitsAsyncUpload() && n.upload.lostTo() != nil:
		// A write through another handle failed after this content was
		// closed asynchronously: that handle's writer heard, this one
		// may not.
		n.upload.owe(n.upload.lostTo())
		n.reportLost(n.upload.lostTo())
	}
	n.settleChargeLocked(false, 0) // what was not uploaded is gone
	n.dropLocal()
	n.upload.lastClosed()
}

// giveUpLocked takes content whose upload failed for good out of the
// pending count and counts it lost, at once for a health report (which
// reads both under the same lock): a report names it in one or the other,
// never in both nor in neither.
func (n *fileNode) giveUpLocked(err error) {
	n.fsys.tally.Lock()
	defer n.fsys.tally.Unlock()
	n.leaveJournaledLocked()
	n.reportLost(err)
}

// reportLost tells, once, of content closed asynchronously that will not
// reach S3 (see uploadState).
func (n *fileNode) reportLost(err error) {
	if n.upload.tellLoss() {
		n.fsys.noteLostUpload(n.key(), err)
	}
}
