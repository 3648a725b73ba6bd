package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/store"
)

// pin is the version of the object a handle reads: all its bytes come
// from that one version (GETs conditional on its ETag), or the read fails
// with ESTALE once the store no longer has it. Versions this mount
// writes replace the pin, as POSIX makes one file's writes visible to
// every reader at once; a version found written elsewhere does not.
type pin struct {
	etag string
	size int64
	seen uint64 // the node's replacedElsewhere when the pin was taken
	used bool   // a READ was answered from this version
	// moves counts the pin's moves (repin, follow): a READ that ran
	// beside one read the version the handle left, whose bytes it must
	// not return.
	moves uint64
}

// follow moves the pin to the node's version unless the handle read
// from its own and the node's came from elsewhere since.
func (p *pin) follow(n *fileNode) {
	if p.used && p.seen != n.replacedElsewhere {
		return
	}
	if p.etag != n.attr.etag {
		p.moves++ // a READ of the old one under way must not answer
	}
	p.etag, p.size, p.seen = n.attr.etag, n.attr.size, n.replacedElsewhere
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := h.node
	var cancel context.CancelFunc = func() {}
	defer func() { cancel() }()
	patient := false
	// The kernel sends READs of one handle side by side (readahead): a
	// READ that lost the race with a move of the pin reads again, at most
	// twice, so that every byte the handle returns is of one version.
	for try := 0; ; try++ {
		n.mu.Lock()
		if n.stream != nil && off < n.stream.size {
			// Reading back what is being streamed: switch to a local copy.
			if err := n.toStaging(ctx); err != nil {
				n.mu.Unlock()
				return nil, toErrno(err)
			}
		}
		if n.local() {
			res, errno := n.readLocalLocked(dest, off)
			n.mu.Unlock()
			return res, errno
		}
		if n.unlinked {
			// Removed, and too large to have been kept (keepForUnlink).
			n.mu.Unlock()
			return nil, syscall.ESTALE
		}
		key, err := n.linkedKey()
		h.pin.follow(n)
		p := h.pin
		gone := p.used && p.seen != n.replacedElsewhere
		n.mu.Unlock()
		if err != nil {
			return nil, toErrno(err)
		}
		if gone {
			// The store holds another version now. Bytes of this one
			// may still be cached (read cache, prefetch), but they would
			// go into the page cache the inode shares with handles that
			// read the new version.
			return nil, syscall.ESTALE
		}
		if !patient {
			ctx, cancel = n.fsys.patient(ctx) // S3 is asked from here on
			patient = true
		}
		res, k, err := h.r.read(ctx, key, p.etag, p.size, dest, off)
		if errors.Is(err, store.ErrChanged) {
			if moved, ok := h.repin(ctx, key, p); ok {
				// Replaced before this handle read a byte, or by this
				// mount: it reads the new version, as if opened after.
				p = moved
				res, k, err = h.r.read(ctx, key, p.etag, p.size, dest, off)
			}
		}
		if err != nil {
			return nil, toErrno(err)
		}
		n.mu.Lock()
		// A short answer ends at the end of the version read. If the
		// file has moved past it, the kernel may know the new, longer
		// size already (from an answer sent meanwhile), and would pad
		// this one with zeros up to that.
		moved := h.pin.moves != p.moves
		passed := k < len(dest) && (n.local() || p.etag != n.attr.etag)
		if n.unlinked && !n.local() {
			// Removed while the GET ran: its pages went at the unlink,
			// and this READ must not cache them again.
			if res != nil {
				res.Done()
			}
			n.mu.Unlock()
			return nil, syscall.ESTALE
		}
		if moved || passed {
			if res != nil {
				res.Done()
			}
			again := moved || n.local() || !h.pin.used
			n.mu.Unlock()
			if again && try < 2 {
				continue // the new version, or the local content
			}
			return nil, syscall.ESTALE
		}
		if errno := n.shortOfKernel(off, k, len(dest)); errno != 0 {
			n.mu.Unlock()
			if res != nil {
				res.Done()
			}
			return nil, errno
		}
		// An answer past the end says the version's size: it counts.
		h.pin.used = true
		if p.etag != n.attr.etag {
			// The page cache, one per inode, now holds bytes of another
			// version than the node's: the next open must drop them.
			n.cachedETag = ""
		}
		n.mu.Unlock()
		n.fsys.stats.BytesRead.Add(int64(k))
		return res, 0
	}
}

// readLocalLocked answers a READ from the content here (a stream being
// written answers past its end only, an empty read).
func (n *fileNode) readLocalLocked(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	size := n.size()
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	asked := len(dest)
	dest = dest[:min(int64(len(dest)), size-off)]
	if n.stream != nil {
		return fuse.ReadResultData(nil), 0
	}
	k, err := n.staging.ReadAt(dest, off)
	if err != nil {
		return nil, syscall.EIO
	}
	if errno := n.shortOfKernel(off, k, asked); errno != 0 {
		return nil, errno
	}
	return sliceReply(dest[:k]), 0
}

// shortOfKernel refuses an answer of k bytes at off to a READ of asked
// that ends before the size the kernel has for the file: the content is
// another version than the one it was told of. Answered short, the
// kernel would take the new end, unless attributes changed while the
// READ ran, when it pads the answer with zeros up to the old size: bytes
// of no version. The reader gets ESTALE, and the kernel asks for the
// size before the next read.
func (n *fileNode) shortOfKernel(off int64, k, asked int) syscall.Errno {
	if k >= asked || off+int64(k) >= n.kernelSize {
		return 0
	}
	n.NotifyContent(-1, 0) // the attributes only: no page lock taken
	return syscall.ESTALE
}

// repin moves the pin of a handle that has not read a byte yet, or whose
// version this mount replaced, to the version the store holds now, and
// reports whether it moved. A READ that failed on pin from reads again
// with the pin another READ moved it to meanwhile.
func (h *handle) repin(ctx context.Context, key string, from pin) (pin, bool) {
	n := h.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if h.pin.moves != from.moves {
		return h.pin, true
	}
	if n.local() || n.revalidateLocked(ctx, key) != nil {
		return pin{}, false
	}
	if h.pin.used && !n.ownVersion(n.attr.etag) {
		return pin{}, false
	}
	h.pin = pin{etag: n.attr.etag, size: n.attr.size, seen: n.replacedElsewhere, used: h.pin.used, moves: h.pin.moves + 1}
	return h.pin, true
}
